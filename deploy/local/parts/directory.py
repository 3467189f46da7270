"""The demo directory as a service of its own: one slapd, one CA, for every box on this machine (the Slurm box of
`make up`, a box of another Slurm release, the Kubernetes box), started by whichever box needs it first and stopped
only when no box needs it any more (issue 49).

    <directory_dir>/tls, ldap/    its CA and certificate, cn=config, data and the portal's password (slapd.py)
    <directory_dir>/claims/<id>   one file per box that needs it, holding that box's state dir
    <directory_dir>/run, log/     slapd's PID and log, the claims' lock, directory.json (the ports it serves)

    acquire(cfg, owner, after_start)   # claim it for `owner` (a box's state dir); start slapd unless it runs
    release(directory_dir, owner)      # drop the claim; stop slapd when no box needs it
    status_line(cfg, owner)            # its PID, who needs it, and whether a login works now

A claim whose box's state dir is gone (removed, not stopped) counts for nothing. A box made before the directory had
a place of its own kept it in its state dir: its first `acquire` stops that slapd and moves its ldap/ and tls/ here,
so the CA and the data stay the same.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import ldap3
from ldap3.core.exceptions import LDAPException

from deploy.local.parts import slapd
from deploy.local.parts.layout import Layout, make_dir
from deploy.supervise import BoxError, Service, service_pid, start_service, stop_service
from portal.config import PortalConfig
from portal.directory import DirectoryError, ldap_connection

DEMO_USER = "alice"  # whose entry the login check looks up


def place(cfg: PortalConfig) -> Layout:
    """The directory's own state dir, as the box's parts see one (tls/, ldap/, run/, log/)."""
    return Layout(replace(cfg, state_dir=cfg.directory_dir))


def _slapd(after_start: Callable[[Layout], str] = lambda lay: "") -> Service:
    return slapd.service(after_start)


@contextmanager
def _claims_lock(root: Path) -> Iterator[None]:
    """One box at a time changes the claims (a blocking lock: two boxes starting side by side both get there)."""
    make_dir(root / "run", 0o755)
    with open(root / "run" / "claims.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _claim_file(root: Path, owner: Path) -> Path:
    return root / "claims" / hashlib.sha256(str(owner.resolve()).encode()).hexdigest()[:16]


def owners(root: Path) -> list[Path]:
    """The boxes that need the directory: its claims whose box's state dir still exists (others are removed)."""
    found = []
    for claim in sorted((root / "claims").glob("*")) if (root / "claims").is_dir() else []:
        owner = Path(claim.read_text().strip())
        if owner.is_dir():
            found.append(owner)
        else:
            claim.unlink(missing_ok=True)
    return found


def _move_legacy(cfg: PortalConfig, lay: Layout) -> list[str]:
    """A box's own slapd of before: stopped; its ldap/ and tls/ become the directory's when it has none yet."""
    legacy = Layout(cfg)
    lines = []
    if service_pid(_slapd(), legacy):
        lines.append(f"slapd of this box's own state dir: {stop_service(_slapd(), legacy)}")
    if (legacy.ldap / ".initialized").exists() and not (lay.ldap / ".initialized").exists():
        for part in ("ldap", "tls"):
            shutil.rmtree(lay.root / part, ignore_errors=True)
            shutil.move(str(legacy.root / part), str(lay.root / part))
        lines.append(f"slapd: the directory and its CA moved from {legacy.root} to {lay.root}, shared by every box")
    return lines


def acquire(cfg: PortalConfig, owner: Path, after_start: Callable[[Layout], str]) -> list[str]:
    """Claim the directory for `owner` and start it unless it runs; the lines to show. BoxError when it runs with
    other ports than `cfg` names (every box must name the same)."""
    lay = place(cfg)
    if lay.root.resolve() == owner.resolve():
        raise BoxError(f"directory_dir is {cfg.directory_dir}, the box's own state dir; allowed: a directory of its "
                       "own, which every box on this machine names")
    for part in (lay.root, lay.run, lay.log, lay.root / "claims"):
        make_dir(part, 0o755)
    record = lay.run / "directory.json"
    ports = {"ldap_port": cfg.ldap_port, "ldaps_port": cfg.ldaps_port}
    with _claims_lock(lay.root):
        lines = _move_legacy(cfg, lay)
        running = service_pid(_slapd(), lay)
        served = json.loads(record.read_text()) if running and record.exists() else ports
        if served != ports:
            raise BoxError(f"the directory in {lay.root} serves ports {served}, this box's settings name {ports}: "
                           "every box on this machine must name the same ldap_port and ldaps_port")
        _claim_file(lay.root, owner).write_text(f"{owner.resolve()}\n")
        lines += start_service(_slapd(after_start), lay)
        record.write_text(json.dumps(ports) + "\n")
        others = [o for o in owners(lay.root) if o != owner.resolve()]
    if others:
        lines.append(f"slapd: shared with {', '.join(map(str, others))}")
    return lines


def release(directory_dir: Path, owner: Path) -> str:
    """Drop `owner`'s claim; stop slapd when no box needs the directory any more."""
    lay = place(PortalConfig(directory_dir=directory_dir))
    if not lay.root.is_dir():
        return "slapd: not running"
    with _claims_lock(lay.root):
        _claim_file(lay.root, owner).unlink(missing_ok=True)
        others = owners(lay.root)
        if others:
            return f"slapd: kept running for {', '.join(map(str, others))} (the directory in {lay.root})"
        return stop_service(_slapd(), lay)


def login_check(cfg: PortalConfig, user: str = DEMO_USER) -> str:
    """Whether a login can work now: a bind as the portal's identity over cfg's TLS and CA, and a look-up of `user`
    (as the hub makes both for every login)."""
    try:
        conn = ldap_connection(cfg)
        try:
            conn.search(cfg.ldap_user_search_base, f"({cfg.ldap_user_attribute}={user})", ldap3.SUBTREE,
                        attributes=[cfg.ldap_user_attribute], size_limit=1)
            found = bool(conn.entries)
        finally:
            conn.unbind()
    except (LDAPException, OSError, DirectoryError) as err:
        return f"FAIL ({type(err).__name__}: {err})"
    return f"work (bound as {cfg.ldap_search_user or 'anonymous'}; {user} {'found' if found else 'NOT found'})"


def status_line(cfg: PortalConfig, owner: Path) -> str:
    """`slapd: running (PID), ...; logins: ...` for a box's status."""
    lay = place(cfg)
    pid = service_pid(_slapd(), lay)
    needed = owners(lay.root) if lay.root.is_dir() else []
    mine = "this box and " if owner.resolve() in needed else "not this box; "
    return (f"slapd: {f'running ({pid})' if pid else 'stopped'}, the directory in {lay.root}, needed by {mine}"
            f"{len([o for o in needed if o != owner.resolve()])} other box(es); logins: {login_check(cfg)}")
