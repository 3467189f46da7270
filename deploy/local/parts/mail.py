"""Mail: Debian's exim4 (in its "local delivery only" configuration) as the box's MTA, on smtp_port at 127.0.0.1.

Slurm's MailProg (slurm/mailprog.sh, portal.jobmail) hands it each job's end-of-job message over SMTP; exim
delivers to /var/mail/<user> for the domains it holds local (this machine's names and dsportal.local, the demo
directory's, which install.sh adds), and refuses every other domain: nothing leaves the machine. exim4 runs as
the daemon the box started (foreground, -bdf), listening only on the box's port, and runs its queue every minute
for a delivery that had to wait. Debian's own /etc/exim4 configuration is used as the package installs it; its
log is /var/log/exim4/mainlog.
"""

from __future__ import annotations

import os
import smtplib
import subprocess
from pathlib import Path

from supervise import BoxError, Service

from parts.layout import LOCALHOST, Layout

EXIM = "/usr/sbin/exim4"
MAIN_LOG = "/var/log/exim4/mainlog"
DEMO_DOMAIN = "dsportal.local"  # the demo directory's users have mail: <uid>@dsportal.local


def check_exim(lay: Layout) -> None:
    """exim4 is installed and delivers the demo directory's addresses here (install.sh sets that up)."""
    if not os.access(EXIM, os.X_OK):
        raise BoxError(f"{EXIM} is missing: run `make install` (it installs Debian's exim4-daemon-light)")
    routed = subprocess.run([EXIM, "-bt", f"postmaster@{DEMO_DOMAIN}"], text=True, capture_output=True, timeout=30)
    if routed.returncode != 0:
        raise BoxError(f"exim4 does not deliver {DEMO_DOMAIN} here ({routed.stdout.strip()[-200:]}): run `make "
                       "install`, which configures Debian's exim4 for local delivery of that domain")


def smtp_ready(lay: Layout) -> str | None:
    try:
        with smtplib.SMTP(LOCALHOST, lay.cfg.smtp_port, timeout=3) as smtp:
            code, _ = smtp.noop()
    except (OSError, smtplib.SMTPException) as err:
        return f"SMTP on {LOCALHOST}:{lay.cfg.smtp_port}: {err}"
    return None if code == 250 else f"SMTP NOOP answered {code}"


def service() -> Service:
    return Service(
        "exim4", "exim4", check_exim,
        # -bdf: the daemon in the foreground (the PID recorded is exim's own); -q1m: a queue run every minute;
        # -oX: listen on the box's port only (not Debian's port 25), so two boxes each have their own.
        lambda lay: [EXIM, "-bdf", "-q1m", "-oX", f"{LOCALHOST}:{lay.cfg.smtp_port}"],
        smtp_ready, 15, lambda lay: [(LOCALHOST, lay.cfg.smtp_port)],
        extra_logs=lambda lay: [Path(MAIN_LOG)])
