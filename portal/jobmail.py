"""Slurm's MailProg for the portal: the e-mail at a training job's end.

A job submitted with `mail` (the submit form's "E-mail me when it ends", the API's and notebooks' `mail` field)
carries `#SBATCH --mail-type=END,FAIL`. When it ends, slurmctld runs MailProg as SlurmUser with Slurm's own
arguments, `-s <subject> <user>`, and the job in its environment (slurm.conf(5), MailProg: SLURM_JOB_ID,
SLURM_JOB_USER, SLURM_JOB_STATE, SLURM_JOB_MAIL_TYPE, SLURM_JOB_RUN_TIME, SLURM_JOB_EXIT_CODE_MAX). Set it there:

    MailProg=/path/to/mailprog.sh   # a script that runs `python -m portal.jobmail "$@"` with the portal's config

Slurm's own subject says only the state; this adds what a data scientist wants to know: the job's best mean AUROC
(read from its TensorBoard files as its user) and a link to its page. The address is the directory's `mail` for
the job's user (an address given to sbatch's --mail-user is used as given). The message goes over SMTP to
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

EXIT_FAILURE, EXIT_USAGE = 1, 2
SMTP_TIMEOUT_S = 30
SLURM_WORD = r"[A-Za-z0-9_:+. -]{1,64}"  # what Slurm puts in the variables read here (states, times, numbers)


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
            sender: str) -> EmailMessage:
    """The message for the job that `env` (MailProg's environment) describes."""
    job_id, state = job_of(env) or "?", _env(env, "SLURM_JOB_STATE", "ENDED")
    auroc = f"{best_auroc:.3f}" if best_auroc is not None else "none recorded"
    message = EmailMessage()
    message["From"], message["To"] = sender, recipient
    message["Subject"] = f"Job {job_id} {state}: best mean AUROC {auroc}"
    message["Date"], message["Message-ID"] = formatdate(localtime=True), make_msgid("dsportal-job")
    lines = [f"Your training job {job_id} ended: {state}."]
    if _env(env, "SLURM_JOB_RUN_TIME"):
        lines.append(f"It ran for {_env(env, 'SLURM_JOB_RUN_TIME')}.")
    exit_line = exit_code_line(env, state)
    if exit_line:
        lines.append(exit_line)
    lines.append(f"Best mean AUROC: {auroc}.")
    lines += ["", f"Its page: {page_url}"] if page_url else ["", "It was not submitted through the portal: no page."]
    lines += ["", "You get this because the job asked for e-mail at its end. For none, untick",
              "\"E-mail me when it ends\" on the submit form (mail=False in a notebook); the",
              "submit page also sets your default for every job."]
    message.set_content("\n".join(lines) + "\n")
    return message


def recipient_of(argv: Sequence[str]) -> str:
    """The address in MailProg's arguments (`-s <subject> <address>`); ValueError for anything else."""
    args = list(argv)
    if len(args) != 3 or args[0] != "-s" or not args[2] or args[2].startswith("-"):
        raise ValueError(f"expected `-s SUBJECT ADDRESS` as Slurm passes them, got {args!r}")
    return args[2]


def address_for(recipient: str, user: str, cfg: PortalConfig) -> str:
    """Where the message goes: Slurm names the job's user when sbatch had no --mail-user; that is the directory's
    `mail` for the user (their name as it is when the directory has none). Anything else was given to sbatch."""
    from portal.directory import MAIL_ADDRESS, USER_NAME, DirectoryError, directory_mail

    if recipient == user and USER_NAME.fullmatch(user):
        try:
            return directory_mail(user, cfg) or user
        except DirectoryError as err:
            print(f"portal.jobmail: no address from the directory for {user} ({err}); mailing {user}",
                  file=sys.stderr)
            return user
    if not (MAIL_ADDRESS.fullmatch(recipient) or USER_NAME.fullmatch(recipient)):
        raise ValueError(f"--mail-user {recipient[:80]!r} is not one address")
    return recipient


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


def send(message: EmailMessage, cfg: PortalConfig) -> None:
    with smtplib.SMTP(cfg.smtp_host, cfg.smtp_port, timeout=SMTP_TIMEOUT_S) as smtp:
        smtp.send_message(message)


def main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    from portal.config import ConfigError, load

    env = os.environ if env is None else env
    job_id, user = job_of(env), _env(env, "SLURM_JOB_USER")
    where = f"portal.jobmail: job {job_id or '?'} of {user or '?'}"
    try:
        recipient = recipient_of(sys.argv[1:] if argv is None else argv)
        cfg = load()
        address = address_for(recipient, user, cfg)
    except (ValueError, ConfigError) as err:
        print(f"{where}: {err}", file=sys.stderr)
        return EXIT_USAGE
    best, page = job_figures(job_id, user, cfg) if job_id and user else (None, None)
    message = compose(env, address, best, page, cfg.mail_from)
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
