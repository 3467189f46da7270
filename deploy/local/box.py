"""The cluster in a box: a private LDAP directory, munge, Slurm with fake GPUs and the hub, on one machine.

Run as root from the repository root:

    /opt/dsportal/venv/bin/python deploy/local/box.py up [--no-hub]
    /opt/dsportal/venv/bin/python deploy/local/box.py status | down | start NAME | stop NAME

Every port and path comes from ``portal.config.load()``; a second box beside a user's is just another
``DSPORTAL_CONFIG`` (or DSPORTAL_STATE_DIR plus DSPORTAL_*_PORT variables). Services are started in the order
slapd, munged, slurmctld, slurmd, hub, and stopped by their recorded PID (never by name) in reverse.

Everything lives under ``cfg.state_dir`` (mode 0755: job users must reach the munge socket and slurm.conf):

    tls/ca.pem, ca.key          self-signed CA (its certificate is cfg.ca_file unless set)
    tls/server.pem, server.key  slapd's certificate, SAN IP:127.0.0.1, DNS:localhost
    ldap/slapd.d/               slapd's cn=config (slapadd -n0 once)
    ldap/data/                  the mdb database: demo users and groups, loaded once
    ldap/rootpw                 password of cn=admin,<base> (0600); hashed in cn=config
    ldap/.initialized           written last: a directory without it is a failed first run, redone
    munge/                      owned by munge: munge.key (0400), munge.socket.2, munged.pid/.log/.seed
    slurm/slurm.conf, cgroup.conf, gres.conf   rewritten from templates/ on every `up`
    slurm/state/, spool/        StateSaveLocation, SlurmdSpoolDir
    slurm/fakegpu/nvidia0..N    FAKE GPUs: character devices 1:3 (/dev/null)
    slurm/*.pid, *.log          Slurm's own PID and log files
    hub/                        the hub's working directory (0700): its database and cookie secret
    run/NAME.pid                the PID this script recorded for each service; run/box.lock
    log/NAME.log                each service's stdout and stderr

State (keys, directory data, Slurm state) is created when missing and never regenerated, so `down` then
`up` gives back the same cluster.
"""

from __future__ import annotations

import argparse
import fcntl
import grp
import os
import pwd
import secrets
import shutil
import signal
import socket
import ssl
import stat
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from string import Template

import ldap3
from ldap3.core.exceptions import LDAPException

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "deploy"))  # daemons.py and selfsigned.py, shared with kubebox.py

from daemons import SurvivedKill, port_in_use, running_pid, tail, terminate  # noqa: E402
from selfsigned import ensure_ca_and_server_cert  # noqa: E402

from portal.config import PortalConfig, load  # noqa: E402  (needs the repo root on sys.path)

TEMPLATES = Path(__file__).resolve().parent / "templates"
LOCALHOST = "127.0.0.1"  # every service of the box listens here only
STOP_TIMEOUT = 10.0  # seconds between SIGTERM and SIGKILL

# The demo directory: (uid, password, uidNumber, given name, surname). gidNumber 100 is Debian's `users`.
DEMO_USERS = [
    ("alice", "wonderland", 10001, "Alice", "Liddell"),
    ("bob", "builder", 10002, "Bob", "Builder"),
    ("mallory", "mallory", 10003, "Mallory", "Malicious"),
    ("admin", "admin-demo", 10004, "Portal", "Admin"),
]
DEMO_PRIMARY_GID = 100
DEMO_GROUPS = [
    ("datascientists", 10100, ["alice", "bob"]),
    ("gpu-users", 10101, ["alice"]),
    ("portal-admins", 10102, ["admin"]),
]


class BoxError(RuntimeError):
    """Something the box cannot do; the message says what failed and where to look."""


# --- Layout and small helpers ---------------------------------------------------------------------


@dataclass(frozen=True)
class Layout:
    """Every path of the state dir, derived from the settings."""

    cfg: PortalConfig

    @property
    def root(self) -> Path:
        return self.cfg.state_dir

    @property
    def tls(self) -> Path:
        return self.cfg.state_dir / "tls"

    @property
    def ldap(self) -> Path:
        return self.cfg.state_dir / "ldap"

    @property
    def munge(self) -> Path:
        return self.cfg.state_dir / "munge"

    @property
    def slurm(self) -> Path:
        return self.cfg.state_dir / "slurm"

    @property
    def hub(self) -> Path:
        return self.cfg.state_dir / "hub"

    @property
    def run(self) -> Path:
        return self.cfg.state_dir / "run"

    @property
    def log(self) -> Path:
        return self.cfg.state_dir / "log"

    @property
    def munge_socket(self) -> Path:
        return self.munge / "munge.socket.2"

    @property
    def rootpw_file(self) -> Path:
        return self.ldap / "rootpw"

    @property
    def root_dn(self) -> str:
        return f"cn=admin,{self.cfg.ldap_base_dn}"

    @property
    def slurm_env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.cfg.slurm_conf_path)}

    def pid_file(self, service: str) -> Path:
        return self.run / f"{service}.pid"

    def log_file(self, service: str) -> Path:
        return self.log / f"{service}.log"


def run(cmd: list[str], what: str) -> subprocess.CompletedProcess[str]:
    """Run a command to completion; on failure raise BoxError naming `what` and the command's output."""
    try:
        return subprocess.run(cmd, check=True, text=True, capture_output=True)
    except FileNotFoundError as err:
        raise BoxError(f"{what}: {cmd[0]} is not installed") from err
    except subprocess.CalledProcessError as err:
        output = (err.stderr or err.stdout or "").strip()
        raise BoxError(f"{what}: `{' '.join(cmd)}` exited {err.returncode}: {output}") from err


def make_dir(path: Path, mode: int = 0o755, owner: str | None = None) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    os.chmod(path, mode)
    if owner:
        shutil.chown(path, owner, owner)
    return path


def write_if_changed(path: Path, text: str, mode: int = 0o644) -> None:
    """Write a generated file; leave it (and its mtime) alone when the content is already right."""
    if not path.exists() or path.read_text() != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(text)
        tmp.replace(path)
    os.chmod(path, mode)


def render(template: str, **values: object) -> str:
    return Template((TEMPLATES / template).read_text()).substitute({k: str(v) for k, v in values.items()})


def check_traversable(path: Path) -> None:
    """Job users and the munge user must reach files under the state dir: every ancestor needs o+x."""
    for parent in [path, *path.parents]:
        if not parent.stat().st_mode & stat.S_IXOTH:
            raise BoxError(
                f"{parent} is mode {stat.S_IMODE(parent.stat().st_mode):o}: other users cannot reach "
                f"{path}; use a state dir whose parents are all world-searchable (o+x)"
            )


# --- TLS --------------------------------------------------------------------------------------------


def ensure_tls(lay: Layout) -> None:
    """A self-signed CA and a server certificate for 127.0.0.1 / localhost, made once."""
    # OpenLDAP's client tools check "localhost" against this machine's own name, so carry it too.
    names = sorted({"localhost", socket.gethostname(), socket.getfqdn()})
    # slapd runs as root here, so root-only keys are readable by it.
    ensure_ca_and_server_cert(make_dir(lay.tls), "server", ca_cn="dsportal demo CA", server_cn="localhost",
                              alt_names=["IP:127.0.0.1", *(f"DNS:{name}" for name in names)], what="server", run=run)


# --- slapd ------------------------------------------------------------------------------------------


def ssha(password: str) -> str:
    return run(["slappasswd", "-h", "{SSHA}", "-s", password], "LDAP: hashing a password").stdout.strip()


def demo_ldif(base: str) -> str:
    """The demo directory: ou=people, ou=groups, the users and their posix groups."""
    entries = [
        f"dn: {base}\nobjectClass: dcObject\nobjectClass: organization\no: Data Scientist Portal\n"
        f"dc: {base.split(',')[0].split('=')[1]}",
        f"dn: ou=people,{base}\nobjectClass: organizationalUnit\nou: people",
        f"dn: ou=groups,{base}\nobjectClass: organizationalUnit\nou: groups",
    ]
    for uid, password, number, given, surname in DEMO_USERS:
        entries.append(
            f"dn: uid={uid},ou=people,{base}\nobjectClass: inetOrgPerson\nobjectClass: posixAccount\n"
            f"uid: {uid}\ncn: {given} {surname}\ngivenName: {given}\nsn: {surname}\n"
            f"mail: {uid}@dsportal.local\nuidNumber: {number}\ngidNumber: {DEMO_PRIMARY_GID}\n"
            f"homeDirectory: /home/{uid}\nloginShell: /bin/bash\nuserPassword: {ssha(password)}")
    for name, gid, members in DEMO_GROUPS:
        entries.append(f"dn: cn={name},ou=groups,{base}\nobjectClass: posixGroup\ncn: {name}\n"
                       f"gidNumber: {gid}\n" + "".join(f"memberUid: {m}\n" for m in members).rstrip())
    return "\n\n".join(entries) + "\n"


def ensure_ldap(lay: Layout) -> None:
    """Create slapd's cn=config and load the demo directory, both offline and only once."""
    ldap, marker = lay.ldap, lay.ldap / ".initialized"
    if marker.exists():
        return
    if ldap.exists():
        shutil.rmtree(ldap)  # no marker: an earlier first run failed half-way; nothing was ever served
    config_dir, data_dir = make_dir(ldap / "slapd.d", 0o700), make_dir(ldap / "data", 0o700)
    os.chmod(ldap, 0o700)
    rootpw = secrets.token_urlsafe(24)
    lay.rootpw_file.touch(mode=0o600)
    lay.rootpw_file.write_text(rootpw)
    config = ldap / "config.ldif"
    config.write_text(render(
        "slapd-config.ldif", config_dir=config_dir, data_dir=data_dir, base_dn=lay.cfg.ldap_base_dn,
        rootpw_hash=ssha(rootpw), ca_file=lay.tls / "ca.pem", cert_file=lay.tls / "server.pem",
        key_file=lay.tls / "server.key"))
    run(["slapadd", "-n0", "-F", str(config_dir), "-l", str(config)], "LDAP: loading cn=config")
    demo = ldap / "demo.ldif"
    demo.write_text(demo_ldif(lay.cfg.ldap_base_dn))
    run(["slapadd", "-F", str(config_dir), "-b", lay.cfg.ldap_base_dn, "-l", str(demo)],
        "LDAP: loading the demo directory")
    for ldif in (config, demo):
        os.chmod(ldif, 0o600)  # they hold password hashes
    marker.touch()


def ldap_connection(lay: Layout, port: int, use_ssl: bool) -> ldap3.Connection:
    """A connection bound as the directory's root, over StartTLS or LDAPS, verifying the box's CA."""
    tls = ldap3.Tls(ca_certs_file=str(lay.tls / "ca.pem"), validate=ssl.CERT_REQUIRED)
    server = ldap3.Server(LOCALHOST, port=port, use_ssl=use_ssl, tls=tls, connect_timeout=3)
    bind = ldap3.AUTO_BIND_NO_TLS if use_ssl else ldap3.AUTO_BIND_TLS_BEFORE_BIND
    return ldap3.Connection(server, user=lay.root_dn, password=lay.rootpw_file.read_text(),
                            auto_bind=bind, receive_timeout=5, raise_exceptions=True)


def slapd_ready(lay: Layout) -> str | None:
    for port, use_ssl in ((lay.cfg.ldap_port, False), (lay.cfg.ldaps_port, True)):
        try:
            ldap_connection(lay, port, use_ssl).unbind()
        except LDAPException as err:
            return f"{'ldaps' if use_ssl else 'ldap+StartTLS'} on port {port}: {err}"
    return None


# --- Unix users from the directory -------------------------------------------------------------------


def sync_unix_users(lay: Layout) -> list[str]:
    """Create the directory's posix groups and users as local Unix accounts; return what was done.

    Slurm runs jobs as Unix users, so alice must exist for the kernel. On a real cluster nslcd
    (libnss-ldapd) or sssd would resolve them from LDAP on every node; the box copies them instead.
    """
    conn = ldap_connection(lay, lay.cfg.ldap_port, use_ssl=False)
    base = lay.cfg.ldap_base_dn
    conn.search(base, "(objectClass=posixGroup)", attributes=["cn", "gidNumber", "memberUid"])
    groups = [(str(e.cn), int(e.gidNumber.value), [str(m) for m in e.memberUid]) for e in conn.entries]
    conn.search(base, "(objectClass=posixAccount)",
                attributes=["uid", "uidNumber", "gidNumber", "homeDirectory", "loginShell", "cn"])
    users = [e.entry_attributes_as_dict for e in conn.entries]
    conn.unbind()
    done = [ensure_group(name, gid) for name, gid, _ in groups]
    for u in users:
        first = {key: values[0] for key, values in u.items() if values}  # single-valued in practice
        done.append(ensure_user(first["uid"], int(first["uidNumber"]), int(first["gidNumber"]),
                                first["homeDirectory"], first.get("loginShell", "/bin/bash"), first.get("cn", "")))
    local_users = {u["uid"][0] for u in users}
    for name, _, members in groups:
        done += [ensure_member(m, name) for m in members if m in local_users]
    return [d for d in done if d]


def ensure_group(name: str, gid: int) -> str:
    try:
        existing = grp.getgrnam(name)
    except KeyError:
        run(["groupadd", "-g", str(gid), name], f"Unix group {name}")
        return f"group {name} ({gid})"
    if existing.gr_gid != gid:
        raise BoxError(f"Unix group {name} exists with gid {existing.gr_gid}, but LDAP says {gid}")
    return ""


def ensure_user(name: str, uid: int, gid: int, home: str, shell: str, gecos: str) -> str:
    try:
        existing = pwd.getpwnam(name)
    except KeyError:
        # HOME_MODE: a home (job logs, notebooks, checkpoints) is its owner's alone, not Debian's 0755.
        run(["useradd", "-u", str(uid), "-g", str(gid), "-d", home, "-s", shell, "-c", gecos,
             "--create-home", "-K", "HOME_MODE=0700", name], f"Unix user {name}")
        return f"user {name} ({uid})"
    if existing.pw_uid != uid:
        raise BoxError(f"Unix user {name} exists with uid {existing.pw_uid}, but LDAP says {uid}; "
                       f"remove or renumber the local account")
    if os.path.isdir(existing.pw_dir) and stat.S_IMODE(os.stat(existing.pw_dir).st_mode) & 0o077:
        os.chmod(existing.pw_dir, 0o700)  # homes made before the box closed them
        return f"home of {name} closed to others"
    return ""


def ensure_member(user: str, group: str) -> str:
    if user in grp.getgrnam(group).gr_mem or pwd.getpwnam(user).pw_gid == grp.getgrnam(group).gr_gid:
        return ""
    run(["usermod", "-a", "-G", group, user], f"adding {user} to Unix group {group}")
    return f"{user} in {group}"


# --- munge ------------------------------------------------------------------------------------------


def ensure_munge(lay: Layout) -> None:
    """munged refuses group/world-writable directories and a key others can read; its dir is 0755 so that
    every user reaches the socket (munged makes the socket itself 0777)."""
    munge = make_dir(lay.munge, 0o755, owner="munge")
    key = munge / "munge.key"
    if not key.exists():
        run(["mungekey", "--create", f"--keyfile={key}"], "munge: creating the key")
    shutil.chown(key, "munge", "munge")
    os.chmod(key, 0o400)


def munge_ready(lay: Layout) -> str | None:
    sock = f"--socket={lay.munge_socket}"
    cred = subprocess.run(["munge", "-n", sock], text=True, capture_output=True)
    if cred.returncode != 0:
        return cred.stderr.strip()
    check = subprocess.run(["unmunge", sock], input=cred.stdout, text=True, capture_output=True)
    return None if check.returncode == 0 else check.stderr.strip()


# --- Slurm ------------------------------------------------------------------------------------------


def ensure_slurm(lay: Layout) -> None:
    """Slurm's directories, the fake GPU devices and the three config files."""
    cfg, slurm = lay.cfg, make_dir(lay.slurm)
    state, spool = make_dir(slurm / "state", 0o700), make_dir(slurm / "spool")  # slurmd does not create it
    gpu_dir = make_dir(slurm / "fakegpu")
    for i in range(cfg.slurm_node_gpus):
        device = gpu_dir / f"nvidia{i}"
        if not device.exists():
            # FAKE GPUs: Slurm insists on character devices; 1:3 is /dev/null.
            os.mknod(device, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
            os.chmod(device, 0o666)  # like /dev/null, whatever the umask
    (gpu_dir / "README").write_text("FAKE GPUs for the cluster in a box: character devices 1:3 (/dev/null).\n")
    gpus = cfg.slurm_node_gpus
    files = f"nvidia[0-{gpus - 1}]" if gpus > 1 else "nvidia0"
    conf_dir = cfg.slurm_conf_path.parent
    write_if_changed(cfg.slurm_conf_path, render(
        "slurm.conf", slurmctld_port=cfg.slurmctld_port, slurmd_port=cfg.slurmd_port,
        munge_socket=lay.munge_socket, state_save=state, spool_dir=spool, slurm_dir=slurm,
        cpus=cfg.slurm_node_cpus, cores_per_socket=max(cfg.slurm_node_cpus // 2, 1),
        memory_mb=cfg.slurm_node_memory_mb, node_gres=f" Gres=gpu:{gpus}" if gpus else ""))
    write_if_changed(conf_dir / "cgroup.conf", render("cgroup.conf"))
    write_if_changed(conf_dir / "gres.conf", render(
        "gres.conf", gpu_dir=gpu_dir,
        gpu_lines=f"NodeName=localhost Name=gpu File={gpu_dir}/{files}" if gpus else ""))


def slurm_cmd(lay: Layout, name: str) -> str:
    return str(lay.cfg.slurm_bin_dir / name)


def slurmctld_ready(lay: Layout) -> str | None:
    ping = subprocess.run([slurm_cmd(lay, "scontrol"), "ping"], env=lay.slurm_env, text=True,
                          capture_output=True)
    return None if "is UP" in ping.stdout else (ping.stdout + ping.stderr).strip()


def slurmd_ready(lay: Layout) -> str | None:
    """The node must be usable; a node left down or drained by an earlier run is resumed."""
    info = subprocess.run([slurm_cmd(lay, "sinfo"), "-h", "-N", "-o", "%N %T"], env=lay.slurm_env,
                          text=True, capture_output=True)
    states = dict(line.split() for line in info.stdout.splitlines() if len(line.split()) == 2)
    node_state = states.get("localhost", "")
    if node_state in ("idle", "mixed", "allocated", "completing"):
        return None
    if node_state.startswith(("down", "drain")) and not node_state.endswith("*"):
        subprocess.run([slurm_cmd(lay, "scontrol"), "update", "nodename=localhost", "state=resume"],
                       env=lay.slurm_env, capture_output=True)
    return f"node localhost is {node_state or 'unknown'} {info.stderr.strip()}".strip()


# --- hub --------------------------------------------------------------------------------------------


def ensure_hub(lay: Layout) -> None:
    if not (REPO / "jupyterhub_config.py").exists():
        raise BoxError(f"hub: {REPO / 'jupyterhub_config.py'} is missing (use `up --no-hub` without it)")
    make_dir(lay.hub, 0o700)


def hub_env(lay: Layout) -> dict[str, str]:
    cfg = lay.cfg
    path = f"{cfg.venv}/bin:{cfg.node_prefix}/node_modules/.bin:{os.environ.get('PATH', '/usr/bin:/bin')}"
    return {**os.environ, "PYTHONPATH": str(REPO), "PATH": path}


def hub_ready(lay: Layout) -> str | None:
    url = f"http://{lay.cfg.hub_ip}:{lay.cfg.hub_port}/hub/api/"
    try:
        with urllib.request.urlopen(url, timeout=3) as response:
            return None if response.status == 200 else f"GET {url}: {response.status}"
    except (urllib.error.URLError, OSError) as err:
        return f"GET {url}: {err}"


# --- services ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Service:
    name: str
    program: str  # basename that must appear in /proc/PID/cmdline, so a recycled PID is not mistaken
    prepare: Callable[[Layout], None]
    command: Callable[[Layout], list[str]]
    ready: Callable[[Layout], str | None]  # None when ready, else why not yet
    timeout: float
    ports: Callable[[Layout], list[tuple[str, int]]]
    user: str | None = None
    env: Callable[[Layout], dict[str, str]] = lambda lay: dict(os.environ)
    cwd: Callable[[Layout], Path] = lambda lay: lay.root
    extra_logs: Callable[[Layout], list[Path]] = lambda lay: []


def _slapd_prepare(lay: Layout) -> None:
    ensure_tls(lay)
    ensure_ldap(lay)


SERVICES = [
    Service(
        "slapd", "slapd", _slapd_prepare,
        # -d keeps slapd in the foreground, so the PID we record is slapd's own; `stats` logs each operation.
        lambda lay: ["/usr/sbin/slapd", "-d", "stats", "-F", str(lay.ldap / "slapd.d"), "-h",
                     f"ldap://{LOCALHOST}:{lay.cfg.ldap_port}/ ldaps://{LOCALHOST}:{lay.cfg.ldaps_port}/"],
        slapd_ready, 15, lambda lay: [(LOCALHOST, lay.cfg.ldap_port), (LOCALHOST, lay.cfg.ldaps_port)]),
    Service(
        "munged", "munged", ensure_munge,
        lambda lay: ["/usr/sbin/munged", "--foreground", f"--socket={lay.munge_socket}",
                     f"--key-file={lay.munge / 'munge.key'}", f"--pid-file={lay.munge / 'munged.pid'}",
                     f"--log-file={lay.munge / 'munged.log'}", f"--seed-file={lay.munge / 'munged.seed'}"],
        munge_ready, 15, lambda lay: [], user="munge",
        extra_logs=lambda lay: [lay.munge / "munged.log"]),
    Service(
        "slurmctld", "slurmctld", ensure_slurm,
        lambda lay: ["/usr/sbin/slurmctld", "-D", "-f", str(lay.cfg.slurm_conf_path)],
        slurmctld_ready, 30, lambda lay: [("0.0.0.0", lay.cfg.slurmctld_port)],
        env=lambda lay: lay.slurm_env, extra_logs=lambda lay: [lay.slurm / "slurmctld.log"]),
    Service(
        "slurmd", "slurmd", ensure_slurm,
        lambda lay: ["/usr/sbin/slurmd", "-D", "-N", "localhost", "-f", str(lay.cfg.slurm_conf_path)],
        slurmd_ready, 30, lambda lay: [("0.0.0.0", lay.cfg.slurmd_port)],
        env=lambda lay: lay.slurm_env, extra_logs=lambda lay: [lay.slurm / "slurmd.log"]),
    Service(
        "hub", "jupyterhub", ensure_hub,
        lambda lay: [f"{lay.cfg.venv}/bin/jupyterhub", "-f", str(REPO / "jupyterhub_config.py")],
        hub_ready, 60,
        lambda lay: [(lay.cfg.hub_ip, lay.cfg.hub_port), (LOCALHOST, lay.cfg.hub_api_port),
                     (LOCALHOST, lay.cfg.proxy_api_port)],
        env=hub_env, cwd=lambda lay: lay.hub),
]
BY_NAME = {s.name: s for s in SERVICES}


def start_service(svc: Service, lay: Layout) -> str:
    """Start one service unless it runs already, and wait until it is ready."""
    svc.prepare(lay)
    pid = running_pid(lay.pid_file(svc.name), svc.program)
    if pid:
        wait_ready(svc, lay, None)
        return f"{svc.name}: already running (pid {pid})"
    for host, port in svc.ports(lay):
        if port_in_use(host, port):
            raise BoxError(f"{svc.name}: port {host}:{port} is already in use by another process")
    started = time.monotonic()
    proc = launch(svc, lay)
    lay.pid_file(svc.name).write_text(f"{proc.pid}\n")
    try:
        wait_ready(svc, lay, proc)
    except BoxError:
        if proc.poll() is None:  # once reaped, its PID may already be another process's
            stop_pid(svc, proc.pid)
        lay.pid_file(svc.name).unlink(missing_ok=True)
        raise
    return f"{svc.name}: started (pid {proc.pid}) in {time.monotonic() - started:.1f} s"


def launch(svc: Service, lay: Layout) -> subprocess.Popen[bytes]:
    """Start the service in the foreground of its own session, detached from this script.

    Foreground mode (no daemonizing) makes the child's PID the service's real PID. munged runs as its
    own user through Popen rather than runuser, which would stay in between as the recorded PID."""
    log = open(lay.log_file(svc.name), "ab")
    log.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} box.py starts {svc.name}\n".encode())
    log.flush()
    user = {"user": svc.user, "group": svc.user, "extra_groups": []} if svc.user else {}
    try:
        return subprocess.Popen(svc.command(lay), stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, cwd=svc.cwd(lay), env=svc.env(lay),
                                start_new_session=True, **user)  # type: ignore[call-overload]
    except OSError as err:
        raise BoxError(f"{svc.name}: cannot start {svc.command(lay)[0]}: {err}") from err
    finally:
        log.close()


def wait_ready(svc: Service, lay: Layout, proc: subprocess.Popen[bytes] | None) -> None:
    deadline = time.monotonic() + svc.timeout
    while True:
        reason = svc.ready(lay)
        if reason is None:
            return
        if proc is not None and proc.poll() is not None:
            raise BoxError(failure(svc, lay, f"exited with status {proc.returncode} before it was ready"))
        if time.monotonic() > deadline:
            raise BoxError(failure(svc, lay, f"not ready within {svc.timeout:.0f} s ({reason})"))
        time.sleep(0.3)


def failure(svc: Service, lay: Layout, what: str) -> str:
    logs = [lay.log_file(svc.name), *svc.extra_logs(lay)]
    tails = "\n".join(f"--- last lines of {log}:\n{tail(log, 30)}" for log in logs if log.exists())
    return f"{svc.name} {what}; read {', '.join(map(str, logs))}\n{tails}"


def stop_pid(svc: Service, pid: int, with_descendants: bool = False) -> bool:
    """SIGTERM, SIGKILL after STOP_TIMEOUT; True when it had to be killed."""
    try:
        return terminate(pid, STOP_TIMEOUT, with_descendants=with_descendants)
    except SurvivedKill as err:
        raise BoxError(f"{svc.name}: {err}") from err


def stop_service(svc: Service, lay: Layout) -> str:
    """SIGTERM the recorded PID; after STOP_TIMEOUT, SIGKILL it and every process it started."""
    pid_file = lay.pid_file(svc.name)
    pid = running_pid(pid_file, svc.program)
    if pid is None:
        pid_file.unlink(missing_ok=True)
        return f"{svc.name}: not running"
    # Its descendants too: the hub's proxy and culler run in sessions of their own, and would outlive a killed hub.
    killed = stop_pid(svc, pid, with_descendants=True)
    pid_file.unlink(missing_ok=True)
    outcome = f"killed after {STOP_TIMEOUT:.0f} s" if killed else "stopped"
    return f"{svc.name}: {outcome} (pid {pid})"


# --- commands ---------------------------------------------------------------------------------------


def prepare_state_dir(lay: Layout) -> None:
    make_dir(lay.root, 0o755)
    check_traversable(lay.root)
    make_dir(lay.run, 0o755)
    make_dir(lay.log, 0o755)


class Lock:
    """One box.py at a time per state dir."""

    def __init__(self, lay: Layout) -> None:
        self.path = lay.run / "box.lock"

    def __enter__(self) -> None:
        self.file = open(self.path, "w")
        try:
            fcntl.flock(self.file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as err:
            raise BoxError(f"another box.py is working on this state dir ({self.path})") from err

    def __exit__(self, *exc: object) -> None:
        self.file.close()


def selected(no_hub: bool) -> Iterator[Service]:
    return (s for s in SERVICES if not (no_hub and s.name == "hub"))


def cmd_up(lay: Layout, no_hub: bool) -> None:
    began = time.monotonic()
    for svc in selected(no_hub):
        start_and_report(svc, lay)
    print(f"\nthe box is up ({time.monotonic() - began:.1f} s); state in {lay.root}")
    print(f"hub: {lay.cfg.hub_url}/" if not no_hub else "hub: not started (--no-hub)")
    print(f"slurm: export SLURM_CONF={lay.cfg.slurm_conf_path}")
    print(f"ldap: ldap://{LOCALHOST}:{lay.cfg.ldap_port} (StartTLS), ldaps://{LOCALHOST}:{lay.cfg.ldaps_port},"
          f" CA {lay.tls / 'ca.pem'}")
    print("demo accounts (user / password: groups):")
    for uid, password, *_ in DEMO_USERS:
        groups = [name for name, _, members in DEMO_GROUPS if uid in members]
        print(f"  {uid} / {password}: {', '.join(groups) or '(no group: login refused)'}")


def start_and_report(svc: Service, lay: Layout) -> None:
    print(start_service(svc, lay), flush=True)
    if svc.name == "slapd":  # the directory may have changed while it was down
        done = sync_unix_users(lay)
        print(f"unix users: {'created ' + ', '.join(done) if done else 'up to date'}", flush=True)


def cmd_down(lay: Layout) -> None:
    for svc in reversed(SERVICES):
        print(stop_service(svc, lay), flush=True)


def cmd_status(lay: Layout) -> None:
    for svc in SERVICES:
        pid = running_pid(lay.pid_file(svc.name), svc.program)
        print(f"{svc.name}: {f'running ({pid})' if pid else 'stopped'}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="The Data Scientist Portal's cluster in a box.")
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="create what is missing, start what is stopped")
    up.add_argument("--no-hub", action="store_true", help="everything but the hub")
    sub.add_parser("down", help="stop every service, in reverse order")
    sub.add_parser("status", help="one line per service")
    for name in ("start", "stop"):
        sub.add_parser(name, help=f"{name} one service").add_argument("name", choices=list(BY_NAME))
    args = parser.parse_args(argv)
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `box.py status | head` ends quietly

    if os.geteuid() != 0:
        print("box.py: run as root (it creates users, devices and runs daemons)", file=sys.stderr)
        return 2
    lay = Layout(load())
    try:
        if args.command == "status":
            cmd_status(lay)
            return 0
        prepare_state_dir(lay)
        with Lock(lay):
            if args.command == "up":
                cmd_up(lay, args.no_hub)
            elif args.command == "down":
                cmd_down(lay)
            elif args.command == "start":
                start_and_report(BY_NAME[args.name], lay)
            else:
                print(stop_service(BY_NAME[args.name], lay))
    except BoxError as err:
        print(f"box.py {args.command}: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
