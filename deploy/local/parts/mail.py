"""Mail: the box's own exim4, on smtp_port at 127.0.0.1, delivering job e-mail to box_mail_dir/<user>.

Slurm's MailProg (slurm/mailprog.sh, portal.jobmail) hands it each job's end-of-job message over SMTP. Each box runs
Debian's exim4 binary with a configuration of its own, written to STATE/exim4/exim4.conf on every start: it takes
mail for the demo directory's domain (dsportal.local) and this machine's own names, refuses every other domain at
RCPT (nothing leaves the machine), and appends to box_mail_dir/<user> as that user, an mbox file as Debian's
/var/mail/<user>. Its queue (STATE/exim4/spool) and logs (STATE/exim4/log/mainlog) are the box's own, so a second
box beside a user's (the tests') never mixes its mail, queue or log with theirs; Debian's /etc/exim4 is not used.

exim keeps root (which it needs to deliver as each user) with a configuration named by -C only when that file is
listed in Debian's TRUSTED_CONFIG_LIST, /etc/exim4/trusted_configs: the box adds its line there before it starts
exim4 and removes exactly that line when it stops it (parts/exim_trust.py).
"""

from __future__ import annotations

import grp
import os
import re
import shutil
import smtplib
import stat
import subprocess
from pathlib import Path

from deploy.local.parts import exim_trust
from deploy.local.parts.layout import LOCALHOST, Layout, make_dir
from deploy.supervise import BoxError, Service, write_if_changed

EXIM = "/usr/sbin/exim4"
EXIM_USER = "Debian-exim"  # Debian's build runs exim as this user when it needs no root (receiving, queue runs)
DEMO_DOMAIN = "dsportal.local"  # the demo directory's users have mail: <uid>@dsportal.local
MAILBOX_DIR_MODE = 0o2775  # as Debian's /var/mail: root:mail, setgid, so deliveries as group mail create mailboxes
# exim expands `$`, `\` and list separators in these paths: only plain characters go into its configuration.
PLAIN_PATH = re.compile(r"^/[A-Za-z0-9._+/-]*\Z")


def exim_dir(lay: Layout) -> Path:
    return lay.root / "exim4"


def exim_conf(lay: Layout) -> Path:
    return exim_dir(lay) / "exim4.conf"


def plain_path(setting: str, path: Path) -> str:
    """The path as exim's configuration may hold it; BoxError naming the setting where it may not."""
    if not PLAIN_PATH.match(str(path)):
        raise BoxError(f"{setting} is {str(path)!r}; allowed for the box's exim4: an absolute path of letters, "
                       "digits and . _ + - / only (exim's configuration would read other characters as syntax)")
    return str(path)


def exim_config(port: int, state: Path, mail_dir: Path) -> str:
    """The box's exim4 configuration: listen on 127.0.0.1:port only, local domains only, an mbox per user in
    mail_dir, its spool and logs under state/exim4/. BoxError naming the setting whose path exim could not hold."""
    home = Path(plain_path("state_dir", state)) / "exim4"
    mailboxes = plain_path("box_mail_dir", mail_dir)
    return f"""\
# The cluster in a box's exim4 configuration, written by deploy/local/parts/mail.py on every start (edits are lost).
# exim keeps root with it (to deliver as each user) because the box lists it in /etc/exim4/trusted_configs while
# its exim4 runs. Local delivery only: mail for {DEMO_DOMAIN} and this machine's names goes to {mailboxes}/<user>;
# any other domain is refused when it is named (RCPT), so nothing leaves the machine.
exim_path = {EXIM}
# The box's port only (the daemon's -oX names it again); nothing of Debian's exim: spool, logs, PID file.
local_interfaces = <; {LOCALHOST}.{port}
domainlist local_domains = @ : localhost : {DEMO_DOMAIN}
spool_directory = {home}/spool
log_file_path = {home}/log/%slog
pid_file_path = {home}/spool/exim-daemon.pid
# No environment for deliveries, no certificate to offer on 127.0.0.1, no DNS or ident look-ups of the sender.
keep_environment =
tls_advertise_hosts =
host_lookup =
rfc1413_query_timeout = 0s
never_users = root
ignore_bounce_errors_after = 2d
timeout_frozen_after = 7d
acl_smtp_rcpt = acl_check_rcpt

begin acl

acl_check_rcpt:
  deny    message = $domain is not delivered by this box: it takes mail for {DEMO_DOMAIN} and this machine only
          !domains = +local_domains
  require verify = recipient
  accept

begin routers

local_user:
  driver = accept
  domains = +local_domains
  check_local_user
  # People's accounts only, as jobs run under: system accounts (uid below 1000, root among them) and nobody get
  # no mailbox here, and are refused when named rather than left in the queue.
  condition = ${{if >={{$local_user_uid}}{{1000}}}}
  local_parts = ! nobody
  transport = mailbox
  cannot_route_message = Unknown user

begin transports

# As Debian's mail_spool: appended as the user, group mail, so the user (and only they) reads and empties it.
mailbox:
  driver = appendfile
  file = {mailboxes}/$local_part_data
  delivery_date_add
  envelope_to_add
  return_path_add
  group = mail
  mode = 0660
  mode_fail_narrower = false

begin retry

*  *  F,2h,15m; G,16h,1h,1.5; F,4d,6h
"""


def check_root_only(path: Path) -> None:
    """exim runs the configuration as root: no one but root may change it or any directory above it (a sticky
    directory such as /var/tmp protects root's entries in it, so it may be writable by others)."""
    for part in [path, *path.parents]:
        info = part.stat()
        writable = info.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not (part.is_dir() and info.st_mode & stat.S_ISVTX)
        if info.st_uid != 0 or writable:
            raise BoxError(f"{part} is owned by uid {info.st_uid}, mode {stat.S_IMODE(info.st_mode):o}: exim4 runs "
                           f"{path} as root, so it and every directory above it must be root's and writable by root "
                           "only; use a state_dir whose parents are root's")


def ensure_mail_dir(path: Path) -> None:
    """box_mail_dir as Debian's /var/mail (root:mail 2775) when the box makes it; one that exists is left as it is,
    but must let group mail create files (each user's delivery runs as that user and group mail)."""
    mail_gid = grp.getgrnam("mail").gr_gid
    if not path.exists():
        path.mkdir(parents=True)
        os.chown(path, 0, mail_gid)
        os.chmod(path, MAILBOX_DIR_MODE)
    info = path.stat()
    if info.st_gid != mail_gid or not info.st_mode & stat.S_IWGRP:
        raise BoxError(f"box_mail_dir {path} is group {info.st_gid}, mode {stat.S_IMODE(info.st_mode):o}: deliveries "
                       f"(as each user, group mail) cannot create mailboxes there; `chgrp mail {path}` and "
                       f"`chmod 2775 {path}`, as /var/mail is, or name another box_mail_dir")


def prepare_exim(lay: Layout) -> None:
    """Before each start: the box's configuration and its spool, log and mail directories; checked, then trusted."""
    check_exim_installed()  # first: its directories belong to Debian's exim user
    text = exim_config(lay.cfg.smtp_port, lay.root, lay.cfg.box_mail_dir)  # a path it cannot hold: nothing made
    home = make_dir(exim_dir(lay), 0o755)
    make_dir(home / "spool", 0o750, EXIM_USER)  # exim writes its queue as its own user
    make_dir(home / "log", 0o2750, EXIM_USER)
    shutil.chown(home / "log", EXIM_USER, "adm")  # as Debian's /var/log/exim4: the adm group reads logs
    ensure_mail_dir(lay.cfg.box_mail_dir)
    write_if_changed(exim_conf(lay), text, mode=0o644)
    os.chown(exim_conf(lay), 0, 0)
    check_root_only(exim_conf(lay))
    check_exim_config(exim_conf(lay))  # before it is trusted: a configuration exim refuses leaves no line behind
    exim_trust.register(exim_conf(lay))


def check_exim_installed() -> None:
    """exim4 is installed, and is a build that trusts the configurations listed in /etc/exim4/trusted_configs."""
    if not os.access(EXIM, os.X_OK):
        raise BoxError(f"{EXIM} is missing: run `make install` (it installs Debian's exim4-daemon-light)")
    if str(exim_trust.TRUSTED_CONFIGS).encode() not in Path(EXIM).read_bytes():
        raise BoxError(f"{EXIM} is not built to trust the configurations listed in {exim_trust.TRUSTED_CONFIGS} "
                       "(TRUSTED_CONFIG_LIST), so with the box's own it could not deliver as each user: install "
                       "Debian's exim4-daemon-light (`make install`)")


def check_exim_config(conf: Path) -> None:
    """exim4 reads the box's configuration without an error (-bV reads all of it)."""
    parsed = subprocess.run([EXIM, "-C", str(conf), "-bV"], text=True, capture_output=True, timeout=30)
    if parsed.returncode != 0:
        said = (parsed.stderr or parsed.stdout).strip()[-300:]
        raise BoxError(f"exim4 refuses the box's configuration {conf} ({said}); deploy/local/parts/mail.py writes it "
                       "from the settings smtp_port, state_dir and box_mail_dir: check those")


def smtp_ready(lay: Layout) -> str | None:
    try:
        with smtplib.SMTP(LOCALHOST, lay.cfg.smtp_port, timeout=3) as smtp:
            code, _ = smtp.noop()
    except (OSError, smtplib.SMTPException) as err:
        return f"SMTP on {LOCALHOST}:{lay.cfg.smtp_port}: {err}"
    return None if code == 250 else f"SMTP NOOP answered {code}"


def service() -> Service:
    return Service(
        "exim4", "exim4", prepare_exim,
        # -C: the box's own configuration (its spool, logs, mailboxes); -bdf: the daemon in the foreground (the PID
        # recorded is exim's own); -q1m: a queue run every minute, for a delivery that had to wait; -oX: the port
        # the configuration names, given again so that the daemon writes no PID file, which it leaves behind.
        lambda lay: [EXIM, "-C", str(exim_conf(lay)), "-bdf", "-q1m", "-oX", f"{LOCALHOST}.{lay.cfg.smtp_port}"],
        smtp_ready, 15, lambda lay: [(LOCALHOST, lay.cfg.smtp_port)],
        extra_logs=lambda lay: [exim_dir(lay) / "log" / "mainlog", exim_dir(lay) / "log" / "paniclog"],
        after_stop=lambda lay: exim_trust.unregister(exim_conf(lay)))
