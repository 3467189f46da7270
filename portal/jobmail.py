"""Slurm's MailProg for the portal: the e-mail at a training job's end.

A job submitted with `mail` (the submit form's "E-mail me when it ends", the API's and notebooks' `mail` field)
carries `#SBATCH --mail-type=END,FAIL`. When it ends, slurmctld runs MailProg as SlurmUser with Slurm's own
arguments, `-s <subject> <user>`, and the job in its environment (slurm.conf(5), MailProg: SLURM_JOB_ID,
SLURM_JOB_USER, SLURM_JOB_STATE, SLURM_JOB_MAIL_TYPE, SLURM_JOB_RUN_TIME, SLURM_JOB_EXIT_CODE_MAX). Set it there:

    MailProg=/path/to/mailprog.sh   # a script that runs `python -m portal.jobmail "$@"` with the portal's config

Slurm's own subject says only the state; this adds what a data scientist wants to know: the job's best mean AUROC
(read from its TensorBoard files as its user) and a link to its page. A job array's (a sweep's) one message states
how the array ended, from its tasks' states: Slurm's own word for an array is only its last task's.

The message goes to one address only: the directory's `mail` for the job's user, the owner as Slurm names them.
What sbatch's --mail-user asked for is never mailed: a job that names anyone else (from a terminal, `sbatch
--mail-user=alice@...` by bob) gets its owner's message, and the refusal is a line of the log naming the job, its
user and the address asked. Without an address from the directory no message goes. The message goes over SMTP to
`smtp_host`:`smtp_port`: the box's exim4 (local delivery only: nothing leaves the machine), or a site's relay.
Every message, and every failure, is one line on stderr (the box appends it to slurm/jobmail.log).
"""

from __future__ import annotations

import os
import re
import smtplib
import sys
from collections.abc import Mapping, Sequence
from email.message import EmailMessage
from email.utils import formatdate, make_msgid

from portal.config import PortalConfig
from portal.errors import NotFound

EXIT_FAILURE, EXIT_USAGE = 1, 2
SMTP_TIMEOUT_S = 30
SLURM_WORD = r"[A-Za-z0-9_:+. -]{1,64}"  # what Slurm puts in the variables read here (states, times, numbers)
# The start of Slurm's subject for a job array's one message (slurmctld's agent.c): "Slurm Array Summary
# Job_id=<array>_* (<job>) Name=<the job's name>...". Only this start is read: the name is the user's text.
ARRAY_SUMMARY = re.compile(r"Slurm Array Summary Job_id=([0-9]{1,12})_\* ")


# Slurm may run MailProg twice for one job array's end (its own record and its last task each find the array
# finished): the first message of an array within this window is its message, the later ones are not sent.
SENT_DIR = "jobmail-sent"  # beside slurm.conf, where MailProg writes its log
SENT_WINDOW_S = 300


class NoAddress(NotFound):
    """The directory gives no address for the job's user: no message goes."""


def _env(env: Mapping[str, str], name: str, default: str = "") -> str:
    """A variable of Slurm's, if it looks like one (a job's values never reach a header unchecked)."""
    value = env.get(name, "")
    return value if re.fullmatch(SLURM_WORD, value) else default


def job_of(env: Mapping[str, str]) -> str:
    """The portal's id of the job `env` describes: a job array's (a sweep's) when it is one, else the job's."""
    array = _env(env, "SLURM_ARRAY_JOB_ID")
    return array if array.isascii() and array.isdigit() else _env(env, "SLURM_JOB_ID")


# A job's end that has an exit code worth telling, when Slurm's variables name none (killed by a signal or failed
# by slurmctld itself: SLURM_JOB_EXIT_CODE2 then carries the signal, or nothing usable).
NOT_SUCCESS = ("FAILED", "OUT_OF_MEMORY", "NODE_FAIL", "TIMEOUT", "BOOT_FAIL", "DEADLINE")


def exit_code_line(env: Mapping[str, str], state: str) -> str:
    """The mail's line on how the job's batch script ended, from slurmctld's MailProg environment (Slurm 22.05,
    agent.c/_set_job_term_info and job_mgr.c/job_common_env_vars): SLURM_JOB_EXIT_CODE2 ("exit:signal") for a
    single job, SLURM_JOB_EXIT_CODE_MAX (with _MIN) or SLURM_JOB_TERM_SIGNAL_MAX for a job array (a sweep), whose
    _MAX is "0" for a job that a signal ended. "" for a job that exited 0; "not known" for a failed one whose
    variables say nothing."""
    pair = re.fullmatch(r"([0-9]{1,3}):([0-9]{1,3})", _env(env, "SLURM_JOB_EXIT_CODE2"))
    if pair and not _env(env, "SLURM_ARRAY_JOB_ID"):
        code, signal = int(pair.group(1)), int(pair.group(2))
        if signal:
            return f"Its exit code: none, killed by signal {signal}."
        if code:
            return f"Its exit code: {code}."
    else:
        low, high = _env(env, "SLURM_JOB_EXIT_CODE_MIN"), _env(env, "SLURM_JOB_EXIT_CODE_MAX")
        signal = _env(env, "SLURM_JOB_TERM_SIGNAL_MAX")
        if high.isdigit() and high != "0":
            return f"Its exit code: {high}." if low in ("", "0", high) else f"Its exit codes: {low} to {high}."
        if signal.isdigit() and signal != "0":
            return f"Its exit code: none, killed by signal {signal}."
    return "Its exit code: not known (see the job's page)." if state.split(" ", 1)[0] in NOT_SUCCESS else ""


def compose(env: Mapping[str, str], recipient: str, best_auroc: float | None, page_url: str | None,
            sender: str, state: str | None = None) -> EmailMessage:
    """The message for the job that `env` (MailProg's environment) describes, which ended `state` (Slurm's
    SLURM_JOB_STATE when not given: a sweep's is `sweep_end`). The best AUROC of a job that did not complete is
    the best so far, and says so."""
    job_id = job_of(env) or "?"
    state = state if state and re.fullmatch(SLURM_WORD, state) else _env(env, "SLURM_JOB_STATE", "ENDED")
    auroc = f"{best_auroc:.3f}" if best_auroc is not None else "none recorded"
    so_far = best_auroc is not None and state != "COMPLETED"  # the best of what ran, not of the whole job
    best = "mean AUROC so far" if so_far else "mean AUROC"
    message = EmailMessage()
    message["From"], message["To"] = sender, recipient
    message["Subject"] = f"Job {job_id} {state}: best {best} {auroc}"
    message["Date"], message["Message-ID"] = formatdate(localtime=True), make_msgid("dsportal-job")
    lines = [f"Your training job {job_id} ended: {state}."]
    if _env(env, "SLURM_JOB_RUN_TIME"):
        lines.append(f"It ran for {_env(env, 'SLURM_JOB_RUN_TIME')}.")
    exit_line = exit_code_line(env, state)
    if exit_line:
        lines.append(exit_line)
    lines.append(f"Best {best}: {auroc}." + (" It did not run to its end." if so_far else ""))
    lines += ["", f"Its page: {page_url}"] if page_url else ["", "It was not submitted through the portal: no page."]
    lines += ["", "You get this because the job asked for e-mail at its end. For none, untick",
              "\"E-mail me when it ends\" on the submit form (mail=False in a notebook); the",
              "submit page also sets your default for every job."]
    message.set_content("\n".join(lines) + "\n")
    return message


def slurm_arguments(argv: Sequence[str]) -> tuple[str, str]:
    """Slurm's subject and the recipient it was asked for, from MailProg's arguments (`-s <subject> <recipient>`:
    the job's --mail-user, its user's name when it named none); ValueError for any other shape. The recipient is
    the job's text: it is compared with the owner's address and logged, never mailed to."""
    args = list(argv)
    if len(args) != 3 or args[0] != "-s":
        raise ValueError(f"expected `-s SUBJECT ADDRESS` as Slurm passes them, got {[a[:80] for a in args[:4]]!r}")
    return args[1], args[2]


def owner_address(user: str, cfg: PortalConfig) -> str:
    """The one address a job's message goes to: the directory's `mail` for the job's user, the owner as Slurm
    names them (SLURM_JOB_USER, which slurmctld sets and the job cannot). NoAddress when the directory has none
    for them or does not answer: no message then, rather than one to an address the directory did not give."""
    from portal.directory import DirectoryError, directory_mail

    try:
        address = directory_mail(user, cfg)
    except DirectoryError as err:
        raise NoAddress(f"no address from the directory for {user or '?'} ({err})") from None
    if address is None:
        raise NoAddress(f"the directory has no `mail` for {user}")
    return address


def asked_for_owner(asked: str, user: str, address: str) -> bool:
    """Whether the recipient Slurm was asked for is the job's owner: their name (what Slurm passes when the job
    named no --mail-user) or their directory address, in any case. Anything else (another user's address, several,
    a display name, a line break) is a refusal to log; the owner's message goes to their address all the same."""
    return asked == user or asked.casefold() == address.casefold()


def array_summary(subject: str, env: Mapping[str, str]) -> str | None:
    """The job array's id when Slurm's subject says this is the array's one message (ARRAY_SUMMARY) for the job
    `env` names, else None. Slurm names no SLURM_ARRAY_JOB_ID when the array's own record never ran a task (a
    sweep cancelled with trials still waiting): the subject still says what it is."""
    found = ARRAY_SUMMARY.match(subject)
    return found.group(1) if found and found.group(1) == job_of(env) else None


def array_tasks(array_id: str, user: str, cfg: PortalConfig) -> list[dict[int, str]]:
    """The array's tasks' states, from Slurm's accounting (sacct) and its controller (squeue, which lists an ended
    job for MinJobAge), asked as MailProg's user for the owner's tasks. An answer Slurm did not give is left out,
    with a line on stderr."""
    from portal.records.sweep import task_states
    from portal.scheduler.slurm.commands import SlurmCommands
    from portal.scheduler.slurm.errors import SlurmError

    slurm, answers = SlurmCommands(cfg), []
    for argv in (("sacct", "-n", "-X", "-P", "-j", array_id, "-u", user, "-o", "JobID,State"),
                 ("squeue", "-h", "-r", "-j", array_id, "-u", user, "-o", "%i|%T")):
        try:
            answers.append(task_states(slurm.run(*argv), array_id))
        except SlurmError as err:
            print(f"portal.jobmail: job {array_id}: its tasks' states: {err}", file=sys.stderr)
    return answers


def sweep_end(slurm_state: str, *answers: Mapping[int, str]) -> str:
    """How a job array (a sweep) ended, for its message: the sweep's own rule (`sweep_outcome`, as its page says)
    over the states its tasks ended in. Slurm's SLURM_JOB_STATE for an array is only its last task's: a sweep
    cancelled after that task completed (a pruned trial ends early) was mailed COMPLETED. A task's ended word
    counts from either answer (squeue says COMPLETING while a task's epilog runs, sacct may hear of an end a
    moment late), and Slurm's word for the array is one of them."""
    from portal.records.states import ENDED_STATES
    from portal.records.sweep import sweep_outcome

    ended = {state for answer in answers for state in answer.values() if state in ENDED_STATES}
    ended |= {slurm_state} & ENDED_STATES
    return sweep_outcome(ended) if ended else slurm_state or "ENDED"


def job_figures(job_id: str, user: str, cfg: PortalConfig) -> tuple[float | None, str | None]:
    """The job's best mean AUROC and its page, read as its user; (None, None) for a job that is not theirs
    through the portal (no record in their ~/jobs), a figure of None when the run wrote none."""
    from portal import jobs

    try:
        job = jobs.get(job_id, user=user, cfg=cfg, check=False)  # Slurm named both: no need to ask it again
    except Exception:  # noqa: BLE001  (mail without the figure rather than no mail)
        return None, None
    page = f"{cfg.hub_url}/services/portal/jobs/{job_id}"
    try:
        if job.plan is not None:  # a sweep: its best trial's
            best = job.sweep().best
            return (best.value if best is not None else None), page
        return job.metrics().best_mean_auroc, page
    except Exception:  # noqa: BLE001
        return None, page


def first_message(cfg: PortalConfig, array_id: str, now: float | None = None) -> bool:
    """Whether this is the first message for job array `array_id` within SENT_WINDOW_S: a marker made exclusively
    claims it. An older marker is an earlier array's whose id Slurm gave again (after its state was reset): taken
    over. Markers older than a day are removed."""
    import time

    sent = cfg.slurm_conf_path.parent / SENT_DIR
    sent.mkdir(mode=0o700, exist_ok=True)
    now = time.time() if now is None else now
    for old in sent.iterdir():
        if now - old.lstat().st_mtime > 86400:
            old.unlink(missing_ok=True)
    marker = sent / f"{cfg.cluster_name}-{array_id}"
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW, 0o600))
    except FileExistsError:
        if now - marker.lstat().st_mtime <= SENT_WINDOW_S:
            return False
    os.utime(marker, (now, now))
    return True


def send(message: EmailMessage, cfg: PortalConfig) -> None:
    with smtplib.SMTP(cfg.smtp_host, cfg.smtp_port, timeout=SMTP_TIMEOUT_S) as smtp:
        smtp.send_message(message)


def main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    from portal.config import ConfigError, load

    env = os.environ if env is None else env
    job_id, user = job_of(env), _env(env, "SLURM_JOB_USER")
    where = f"portal.jobmail: job {job_id or '?'} of {user or '?'}"
    try:
        subject, asked = slurm_arguments(sys.argv[1:] if argv is None else argv)
        cfg = load()
        address = owner_address(user, cfg)
    except (ValueError, ConfigError) as err:
        print(f"{where}: {err}", file=sys.stderr)
        return EXIT_USAGE
    except NoAddress as err:
        print(f"{where}: not mailed: {err}", file=sys.stderr)
        return EXIT_FAILURE
    if not asked_for_owner(asked, user, address):
        print(f"{where}: refused --mail-user {asked[:80]!r}: not {user}'s address; the message goes to {address} "
              "only", file=sys.stderr)
    state, array_id = None, array_summary(subject, env)
    if (array_id or _env(env, "SLURM_ARRAY_JOB_ID")) and not first_message(cfg, job_id):
        print(f"{where}: not mailed again: job array {job_id}'s message went {SENT_WINDOW_S} s ago or less "
              f"(Slurm's subject {subject[:60]!r})", file=sys.stderr)
        return 0
    if array_id:
        env = {**env, "SLURM_ARRAY_JOB_ID": array_id}  # the exit codes are then read as the array's (exit_code_line)
        state = sweep_end(_env(env, "SLURM_JOB_STATE"), *array_tasks(array_id, user, cfg))
    best, page = job_figures(job_id, user, cfg) if job_id and user else (None, None)
    message = compose(env, address, best, page, cfg.mail_from, state)
    try:
        send(message, cfg)
    except (OSError, smtplib.SMTPException) as err:
        print(f"{where}: the MTA at {cfg.smtp_host}:{cfg.smtp_port} did not take the message to {address}: "
              f"{err}", file=sys.stderr)
        return EXIT_FAILURE
    print(f"{where}: {message['Subject']!r} sent to {address}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
