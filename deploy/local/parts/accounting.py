"""Slurm accounting: the box's private MariaDB, slurmdbd on top of it, the cluster registered, and the
directory's groups and quotas as Slurm accounts and associations (portal.accounts)."""

from __future__ import annotations

import fcntl
import secrets
import subprocess
from pathlib import Path

from deploy.local.parts.layout import LOCALHOST, Layout, make_dir, render
from deploy.local.parts.slurm import prepare_cluster
from deploy.supervise import BoxError, Service, flags, run, write_if_changed

DB_NAME = "slurm_acct_db"
DB_USER = "slurm"


def db_dir(lay: Layout) -> Path:
    return lay.accounting / "mariadb"


def db_socket(lay: Layout) -> Path:
    return db_dir(lay) / "mariadbd.sock"  # in its own directory: mariadbd runs as mysql, which may write only there


def client(lay: Layout, statement: str) -> list[str]:
    """The mariadb client running SQL as MariaDB's root, who logs in over the socket as the Unix root user."""
    return ["mariadb", "--no-defaults", "-S", str(db_socket(lay)), "-u", "root", "-N", "-e", statement]


def sql(lay: Layout, statement: str, what: str) -> str:
    return run(client(lay, statement), f"accounting database: {what}").stdout


# --- MariaDB ----------------------------------------------------------------------------------------------


# mariadb-install-db bootstraps a server of its own, which shares with every other MariaDB on the machine what a
# server started without a socket, a pid file or a tmpdir of its own uses: two boxes making their data directories
# at once (the Slurm test box and a release's box, side by side in `make test`) could fail each other. One at a
# time, machine-wide; each takes about 2 s.
INSTALL_LOCK = Path("/run/lock/dsportal-mariadb-install-db.lock")


def ensure_database_files(lay: Layout) -> None:
    """The data directory, made once by mariadb-install-db (about 2 s, one box at a time: INSTALL_LOCK); a
    half-made one is made again."""
    make_dir(lay.accounting, 0o755)
    data, marker = db_dir(lay), lay.accounting / ".initialized"
    if marker.exists():
        return
    INSTALL_LOCK.parent.mkdir(parents=True, exist_ok=True)
    with open(INSTALL_LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, or when this process dies
        if data.exists():
            run(["rm", "-rf", "--", str(data)], "accounting database: removing a half-made data directory")
        make_dir(data, 0o700, owner="mysql")
        run(["mariadb-install-db", "--no-defaults", "--user=mysql", f"--datadir={data}",
             "--auth-root-authentication-method=socket", "--skip-test-db"],
            "accounting database: creating it")
    marker.touch()


def mariadb_ready(lay: Layout) -> str | None:
    probe = subprocess.run(client(lay, "SELECT 1"), text=True, capture_output=True)
    return None if probe.returncode == 0 else probe.stderr.strip()


def mariadb_service() -> Service:
    return Service(
        "mariadb", "mariadbd", ensure_database_files,
        lambda lay: ["/usr/sbin/mariadbd", "--no-defaults", "--skip-name-resolve", *flags(
            datadir=db_dir(lay), socket=db_socket(lay), port=lay.cfg.accounting_db_port, bind_address=LOCALHOST,
            pid_file=db_dir(lay) / "mariadbd.pid", innodb_buffer_pool_size="32M")],
        mariadb_ready, 30, lambda lay: [(LOCALHOST, lay.cfg.accounting_db_port)], user="mysql")


# --- slurmdbd ---------------------------------------------------------------------------------------------


def db_password(lay: Layout) -> str:
    path = lay.accounting / "slurmdbd.pass"
    if not path.exists():
        write_if_changed(path, secrets.token_urlsafe(24), mode=0o600)
    return path.read_text().strip()


def _prepare_slurmdbd(lay: Layout) -> None:
    """slurmdbd.conf (beside slurm.conf, where slurmdbd looks for it) and its database user, made idempotently."""
    if mariadb_ready(lay) is not None:
        raise BoxError("slurmdbd: the accounting database (mariadb) is not running; start it first")
    prepare_cluster(lay)  # sacctmgr reads slurm.conf and reaches slurmdbd at the bridge's address
    password = db_password(lay)  # token_urlsafe: letters, digits, - and _, nothing SQL would read as quoting
    sql(lay, f"CREATE DATABASE IF NOT EXISTS {DB_NAME}; "
             f"CREATE USER IF NOT EXISTS '{DB_USER}'@'{LOCALHOST}' IDENTIFIED BY '{password}'; "
             f"ALTER USER '{DB_USER}'@'{LOCALHOST}' IDENTIFIED BY '{password}'; "
             f"GRANT ALL ON {DB_NAME}.* TO '{DB_USER}'@'{LOCALHOST}';", "granting slurmdbd its database")
    write_if_changed(lay.cfg.slurm_conf_path.parent / "slurmdbd.conf", render(
        "slurmdbd.conf", munge_socket=lay.munge_socket, slurmdbd_port=lay.cfg.slurmdbd_port, slurm_dir=lay.slurm,
        db_port=lay.cfg.accounting_db_port, db_password=password, db_name=DB_NAME), mode=0o600)


def sacctmgr(lay: Layout, *args: str, check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    command = [lay.slurm_cmd("sacctmgr"), *args]
    if check:
        return run(command, f"accounting: sacctmgr {' '.join(args)}", env=lay.slurm_env, timeout=timeout)
    return subprocess.run(command, env=lay.slurm_env, text=True, capture_output=True, timeout=timeout)


def slurmdbd_ready(lay: Layout) -> str | None:
    try:
        probe = sacctmgr(lay, "-n", "show", "cluster", "format=cluster", check=False, timeout=5)
    except subprocess.TimeoutExpired:
        return "sacctmgr did not answer within 5 s"
    return None if probe.returncode == 0 else (probe.stderr or probe.stdout).strip()


def register_cluster(lay: Layout) -> str:
    """The cluster must be known to slurmdbd before slurmctld's first start, which dies otherwise."""
    name = lay.cfg.cluster_name
    clusters = sacctmgr(lay, "-n", "-P", "show", "cluster", "format=cluster").stdout.split()
    if name in clusters:
        return ""
    sacctmgr(lay, "-i", "add", "cluster", name)
    return f"accounting: cluster {name} registered"


def sync_accounts(lay: Layout) -> str:
    """The directory's groups and quotas as Slurm accounts and associations: the same as `python -m
    portal.accounts sync`, which an admin runs after changing the directory. It reads the cluster's name from
    slurmctld, so it runs once slurmctld is up (which then hears of the changes from slurmdbd)."""
    from portal import directory  # the portal's own sync
    from portal.scheduler.slurm import accounts
    from portal.scheduler.slurm.errors import SlurmError

    try:
        changes = accounts.sync(lay.cfg, warn=lambda line: print(f"accounting: {line}", flush=True))
    except (directory.DirectoryError, SlurmError) as err:
        raise BoxError(f"accounting: syncing the directory's groups into Slurm failed: {err}") from err
    if not changes:
        return "accounting: associations in sync with the directory"
    return "\n".join([f"accounting: {len(changes)} changes from the directory",
                      *(f"  {change.line}" for change in changes)])


def slurmdbd_service() -> Service:
    return Service(
        "slurmdbd", "slurmdbd", _prepare_slurmdbd,
        # slurmdbd has no -f: it reads slurmdbd.conf from the directory of SLURM_CONF.
        lambda lay: [lay.slurm_daemon("slurmdbd"), "-D"],
        slurmdbd_ready, 30, lambda lay: [("0.0.0.0", lay.cfg.slurmdbd_port)],
        env=lambda lay: lay.slurm_env, extra_logs=lambda lay: [lay.slurm / "slurmdbd.log"],
        after_start=register_cluster)
