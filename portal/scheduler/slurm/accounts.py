"""Slurm accounting associations from the LDAP directory, so that Slurm itself holds every user to their GPU quota.

    python -m portal.accounts sync [--dry-run]   # as root: one line per change, then "N changes" or "in sync"
    python -m portal.accounts show               # user, account and GPU limit, as Slurm has them

Groups become accounts; each user who may log in gets one association, in the group that gives their quota, with
GrpTRES=gres/gpu=<quota>, MaxSubmitJobs=<max_jobs_per_user> and, where their groups give them a weekly GPU-hours
budget (gpu_hours_budget), GrpTRESMins=gres/gpu=<budget x 60>: Slurm itself holds them to it, counting from
Sunday 00:00 (slurm.conf's PriorityUsageResetPeriod=WEEKLY), jobs submitted outside the portal too. The rules
(`desired_state`, `plan`, the sacctmgr parsers) are pure; `sync` and `main` take the directory reader
(portal.directory's `read_directory` unless told) and the Slurm command runner as arguments, so the box and the
tests pass their own.
"""

from __future__ import annotations

import logging
import os
import re
import shlex
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from portal.config import ConfigError, PortalConfig, load
from portal.directory import USER_NAME, DirectoryError, Group, normal_dn, read_directory
from portal.inputs import ascii_digits
from portal.quota import quota_group
from portal.scheduler.slurm.commands import SlurmCommands
from portal.scheduler.slurm.errors import SlurmError

PROG = "python -m portal.accounts"
USAGE = f"usage: {PROG} sync [--dry-run] | show   (as root)"
EXIT_FAILURE, EXIT_USAGE = 1, 2
SLURM_ROOT = "root"  # Slurm's own account and user: never changed here
QOS, DENY_ON_LIMIT = "normal", "DenyOnLimit"
ASSOC_FORMAT = "Cluster,Account,User,GrpTRES,MaxSubmitJobs,GrpTRESMins"
SACCTMGR = ("sacctmgr", "-i")  # -i: commit without asking
# sacctmgr lower-cases names and splits arguments at ',', '=' and blanks: other names would become other accounts.
ACCOUNT_NAME = re.compile(r"^[a-z0-9_][a-z0-9_.-]{0,63}$")
ACCOUNT_NAMES = "lower-case letters, digits, '_', and '-' or '.' after the first character, at most 64 characters"
USER_NAMES = "a lower-case letter or '_', then lower-case letters, digits, '_' or '-', at most 32 characters; not root"

Runner = Callable[[Sequence[str]], str]  # a Slurm command (program name first) -> its stdout; raises SlurmError
log = logging.getLogger("portal.scheduler.slurm.accounts")


DirectoryReader = Callable[[PortalConfig], Sequence[Group]]


@dataclass(frozen=True)
class Association:
    user: str
    account: str
    gpus: int | None  # GrpTRES gres/gpu; None: no GPU limit
    max_jobs: int | None = None  # MaxSubmitJobs: jobs queued and running at once; None: no limit
    gpu_minutes: int | None = None  # GrpTRESMins gres/gpu: the weekly GPU-hours budget x 60; None: no budget


@dataclass(frozen=True)
class Accounting:
    """Accounts and user associations on one cluster: as Slurm holds them, or as the directory calls for."""

    accounts: frozenset[str]
    associations: tuple[Association, ...]
    default_accounts: Mapping[str, str]  # user -> DefaultAccount
    qos_flags: tuple[str, ...] = (DENY_ON_LIMIT,)  # of QOS normal
    cluster: str = ""
    warnings: tuple[str, ...] = ()  # what the directory has that Slurm cannot hold


@dataclass(frozen=True)
class Change:
    line: str  # what changes, for people
    commands: tuple[tuple[str, ...], ...]  # the sacctmgr commands that make it, in order


def quota_account(groups: Sequence[str], allowed: Sequence[str], cfg: PortalConfig) -> str | None:
    """A user's account among their groups (those that can be accounts): the group that gives their quota (the
    largest; ties: alphabetical), else their first allowed group alphabetically."""
    return quota_group(cfg.gpu_quota, groups) or min(allowed, default=None)


def desired_state(directory: Sequence[Group], cfg: PortalConfig) -> Accounting:
    """The accounts and associations the directory's groups and the settings call for."""
    warnings = [f"group {g.name}: members {', '.join(g.skipped)} name no user (nested groups are not followed)"
                for g in directory if g.skipped]
    accounts = frozenset(g.name for g in directory if ACCOUNT_NAME.match(g.name) and g.name != SLURM_ROOT)
    warnings += [f"group {g.name!r} cannot be a Slurm account (left out); allowed: {ACCOUNT_NAMES}, except root"
                 for g in directory if g.name not in accounts]
    allowed_dns = {normal_dn(cfg.group_dn(g)): g for g in cfg.allowed_groups}
    found = {normal_dn(g.dn) for g in directory}
    warnings += [f"allowed group {g} is not under {cfg.ldap_group_search_base}: its members get no association"
                 for dn, g in allowed_dns.items() if dn not in found]
    groups_of: dict[str, list[Group]] = {}
    for group in directory:
        for member in group.members:
            groups_of.setdefault(member, []).append(group)
    users = []
    for user, groups in sorted(groups_of.items()):
        allowed = [g.name for g in groups if normal_dn(g.dn) in allowed_dns]
        if not allowed:
            continue
        if user == SLURM_ROOT or not USER_NAME.match(user):  # root is Slurm's own
            warnings.append(f"user {user!r} in {', '.join(allowed)} gets no association; allowed: {USER_NAMES}")
            continue
        account = quota_account([g.name for g in groups if g.name in accounts], [g for g in allowed if g in accounts],
                                cfg)
        if account is None:
            warnings.append(f"user {user} gets no association: none of their groups can be a Slurm account")
            continue
        names = [g.name for g in groups]
        budget = cfg.gpu_hours_budget_for(names)
        users.append(Association(user, account, cfg.gpu_quota_for(names), cfg.max_jobs_per_user,
                                 budget * 60 if budget else None))
    return Accounting(accounts, tuple(users), {a.user: a.account for a in users}, warnings=tuple(warnings))


def gpu_limit(tres: str) -> int | None:
    """gres/gpu in a GrpTRES such as `cpu=8,gres/gpu=4`; None: no GPU limit (gres/gpu:v100 is another TRES)."""
    match = re.search(r"(?:^|,)gres/gpu=(\d+)(?:,|$)", tres)
    return int(match.group(1)) if match else None


def cluster_name(config_text: str) -> str:
    """ClusterName from `scontrol show config` (Slurm keeps cluster names in lower case)."""
    match = re.search(r"^ClusterName\s*=\s*(\S+)\s*$", config_text, re.MULTILINE)
    if not match:
        raise SlurmError("`scontrol show config` reports no ClusterName")
    return match.group(1).lower()


def _rows(text: str, fields: int, keep: int | None = None) -> list[list[str]]:
    """`sacctmgr -nP` output: '|' between fields (-p would add one at the end); rows of at least `fields` fields,
    each cut to `keep` (default: `fields`)."""
    return [row[:keep or fields] for row in (line.strip().split("|") for line in text.splitlines())
            if len(row) >= fields]


def parse_associations(text: str, cluster: str) -> tuple[frozenset[str], tuple[Association, ...]]:
    """`show assoc format=ASSOC_FORMAT`: accounts (rows without a user) and user associations."""
    rows = [(row + ["", ""])[:6] for row in _rows(text, 4, keep=6) if row[0] == cluster and row[1]]
    associations = {Association(user, account, gpu_limit(tres), int(jobs) if ascii_digits(jobs) else None,
                                gpu_limit(minutes))
                    for _, account, user, tres, jobs, minutes in rows if user}
    return frozenset(r[1] for r in rows if not r[2]), tuple(sorted(associations, key=lambda a: (a.user, a.account)))


def parse_default_accounts(text: str) -> dict[str, str]:
    """`show user format=User,DefaultAccount`: user -> default account (users without one are left out)."""
    return {user: account for user, account in _rows(text, 2) if user and account}


def parse_qos_flags(text: str, qos: str = QOS) -> tuple[str, ...] | None:
    """`show qos format=Name,Flags`: the QOS's flags; None when Slurm has no such QOS."""
    return next((tuple(f for f in flags.split(",") if f) for name, flags in _rows(text, 2) if name == qos), None)


def _gpus(n: int | None) -> str:
    return "no GPU limit" if n is None else "no GPUs" if n == 0 else f"at most {n} GPU{'s' * (n != 1)}"


def _remove(user: str, account: str, cluster: str) -> Change:
    return Change(f"remove {user}'s association (account {account})", (
        (*SACCTMGR, "delete", "user", "where", f"Name={user}", f"Account={account}", f"Cluster={cluster}"),))


def _limits(want: Association, now: Association | None = None) -> tuple[str, ...]:
    """What `want` sets; a budget the association has (`now`) and `want` has not is cleared (-1: no limit)."""
    minutes = [f"GrpTRESMins=gres/gpu={want.gpu_minutes}"] if want.gpu_minutes else \
        ["GrpTRESMins=gres/gpu=-1"] if now is not None and now.gpu_minutes else []
    return (f"GrpTRES=gres/gpu={want.gpus}", *([f"MaxSubmitJobs={want.max_jobs}"] if want.max_jobs else []), *minutes)


def _budget(minutes: int | None) -> str:
    return "no weekly budget" if not minutes else f"{minutes // 60} GPU-hours a week"


def _user_changes(want: Association, have: Mapping[str, Association], default: str, cluster: str) -> list[Change]:
    user, account = want.user, want.account
    add = (*SACCTMGR, "add", "user", f"Name={user}", f"Cluster={cluster}", f"Account={account}",
                    f"DefaultAccount={account}", *_limits(want))
    set_default = (*SACCTMGR, "modify", "user", "where", f"Name={user}", f"Cluster={cluster}",
                            "set", f"DefaultAccount={account}")
    if not have:
        return [Change(f"add {user} to account {account} with {_gpus(want.gpus)}", (add,))]
    if account not in have:
        # The new association and default first: Slurm refuses to remove a default while another association exists.
        old = sorted(have)
        return [Change(f"move {user} from {', '.join(old)} to {account} with {_gpus(want.gpus)}",
                       (add, set_default, *(_remove(user, a, cluster).commands[0] for a in old)))]
    changes = []
    now = have[account]
    if (now.gpus, now.max_jobs, now.gpu_minutes) != (want.gpus, want.max_jobs, want.gpu_minutes):
        said = [f"GPU limit {'none' if now.gpus is None else now.gpus} -> {want.gpus}"] if now.gpus != want.gpus \
            else []
        said += [f"job limit {now.max_jobs or 'none'} -> {want.max_jobs}"] if now.max_jobs != want.max_jobs else []
        said += [f"{_budget(now.gpu_minutes)} -> {_budget(want.gpu_minutes)}"] \
            if now.gpu_minutes != want.gpu_minutes else []
        changes.append(Change(
            f"{user}: {', '.join(said)}",
            ((*SACCTMGR, "modify", "user", "where", f"Name={user}", f"Account={account}", f"Cluster={cluster}",
                       "set", *_limits(want, now)),)))
    if default != account:
        changes.append(Change(f"{user}: default account {default or 'none'} -> {account}", (set_default,)))
    return changes + [_remove(user, a, cluster) for a in sorted(set(have) - {account})]


def plan(desired: Accounting, current: Accounting) -> list[Change]:
    """The changes from `current` to `desired`, in an order Slurm accepts: accounts before the users that need them,
    users' associations removed before their accounts. Slurm's root account and user are left as they are."""
    cluster = current.cluster
    changes = [Change(f"add account {a}", ((*SACCTMGR, "add", "account", f"Name={a}", f"Cluster={cluster}"),))
               for a in sorted(desired.accounts - current.accounts)]
    if DENY_ON_LIMIT.lower() not in {f.lower() for f in current.qos_flags}:
        changes.append(Change(f"set {DENY_ON_LIMIT} on QOS {QOS}", (
            (*SACCTMGR, "modify", "qos", "where", f"Name={QOS}", "set", f"Flags+={DENY_ON_LIMIT}"),)))
    mine = [a for a in current.associations if SLURM_ROOT not in (a.user, a.account)]
    held = {user: {a.account: a for a in mine if a.user == user} for user in {a.user for a in mine}}
    for want in desired.associations:
        changes += _user_changes(want, held.get(want.user, {}), current.default_accounts.get(want.user, ""), cluster)
    for user in sorted(set(held) - set(desired.default_accounts)):
        default = current.default_accounts.get(user)
        # The default last: Slurm 22.05 refuses to remove it together with, or before, the user's other ones.
        changes += [_remove(user, a, cluster) for a in sorted(held[user], key=lambda a: (a == default, a))]
    kept = {a.account for a in current.associations if a.user == SLURM_ROOT} | {SLURM_ROOT}
    changes += [Change(f"remove account {a}", ((*SACCTMGR, "delete", "account", "where", f"Name={a}",
                                                         f"Cluster={cluster}"),))
                for a in sorted(current.accounts - desired.accounts - kept)]
    return changes


def slurm_runner(cfg: PortalConfig) -> Runner:
    """Slurm's commands as root, through the portal's one Slurm runner: stdout, or SlurmError in Slurm's words."""
    commands = SlurmCommands(cfg)
    return lambda argv: commands.run(*argv)


def read_slurm(cfg: PortalConfig, run: Runner | None = None) -> Accounting:
    """What Slurm's accounting holds now on this cluster (the one slurmctld reports)."""
    run = run or slurm_runner(cfg)
    cluster = cluster_name(run(["scontrol", "show", "config"]))
    accounts, associations = parse_associations(run(["sacctmgr", "-nP", "show", "assoc", f"Cluster={cluster}",
                                                     f"format={ASSOC_FORMAT}"]), cluster)
    defaults = parse_default_accounts(
        run(["sacctmgr", "-nP", "show", "user", f"Cluster={cluster}", "format=User,DefaultAccount"]))
    flags = parse_qos_flags(run(["sacctmgr", "-nP", "show", "qos", QOS, "format=Name,Flags"]))
    if flags is None:
        raise SlurmError(f"Slurm has no QOS {QOS} (slurmdbd creates it; `sacctmgr add qos {QOS}` makes it again)")
    return Accounting(accounts, associations, defaults, flags, cluster)


def apply(changes: Iterable[Change], cfg: PortalConfig, run: Runner | None = None,
          report: Callable[[Change], None] | None = None) -> None:
    """Make the changes one by one, reporting each once it is made; the first one Slurm refuses stops the rest."""
    run = run or slurm_runner(cfg)
    for change in changes:
        for argv in change.commands:
            run(argv)
        if report:
            report(change)


def sync(cfg: PortalConfig, dry_run: bool = False, *, read_dir: DirectoryReader = read_directory,
         run: Runner | None = None, report: Callable[[Change], None] | None = None,
         warn: Callable[[str], None] = log.warning) -> list[Change]:
    """Bring Slurm's associations in line with the directory: the changes made (dry run: those it would make).
    `report` hears of each once made (dry run: planned), `warn` of what the directory has that Slurm cannot hold."""
    run = run or slurm_runner(cfg)
    desired = desired_state(read_dir(cfg), cfg)
    for warning in desired.warnings:
        warn(warning)
    changes = plan(desired, read_slurm(cfg, run))
    apply(changes, cfg, (lambda argv: "") if dry_run else run, report)  # a dry run runs nothing
    return changes


def show_lines(associations: Sequence[Association]) -> list[str]:
    """A table of user, account and GPU limit ("none": no GPU limit)."""
    rows = [("USER", "ACCOUNT", "GPUS")] + [(a.user, a.account, "none" if a.gpus is None else str(a.gpus))
                                            for a in associations]
    width = [max(len(row[i]) for row in rows) for i in (0, 1)]
    return [f"{user:<{width[0]}}  {account:<{width[1]}}  {gpus}" for user, account, gpus in rows]


def main(argv: list[str] | None = None, *, read_dir: DirectoryReader = read_directory,
         run: Runner | None = None, euid: int | None = None, cfg: PortalConfig | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv not in (["sync"], ["sync", "--dry-run"], ["show"]):
        print(f"{PROG}: error: {shlex.join(argv) or 'no command'}: not a command; {USAGE}", file=sys.stderr)
        return EXIT_USAGE
    if (os.geteuid() if euid is None else euid) != 0:
        print(f"{PROG}: must run as root: only a Slurm administrator may change associations", file=sys.stderr)
        return EXIT_USAGE
    try:
        cfg = cfg or load()
        if argv == ["show"]:
            print("\n".join(show_lines(read_slurm(cfg, run).associations)))
            return 0
        changes = sync(cfg, "--dry-run" in argv, read_dir=read_dir, run=run, report=lambda c: print(c.line, flush=True),
                       warn=lambda w: print(f"{PROG}: warning: {w}", file=sys.stderr))
    except ConfigError as err:
        print(f"{PROG}: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    except (DirectoryError, SlurmError) as err:
        print(f"{PROG}: {err}", file=sys.stderr)
        return EXIT_FAILURE
    count, dry_run = len(changes), "--dry-run" in argv
    print(f"{count} change{'s' * (count != 1)}{' (dry run: nothing changed)' * dry_run}" if count else "in sync")
    return 0


if __name__ == "__main__":
    sys.exit(main())
