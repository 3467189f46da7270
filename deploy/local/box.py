"""The cluster in a box: a private LDAP directory, munge, Slurm with accounting and compute nodes that are hosts of
their own (network namespaces, fake GPUs), and the hub, on one machine.

Run as root from the repository root:

    /opt/dsportal/venv/bin/python -m deploy.local.box up [--no-hub]
    /opt/dsportal/venv/bin/python -m deploy.local.box status | down | start NAME | stop NAME | crash [NODE]

Every port and path comes from ``portal.config.load()``; a second box beside a user's is just another
``DSPORTAL_CONFIG`` (its own state dir, ports, box_subnet and box_node_prefix). Services start in the order
slapd (the machine's one directory: claimed, started unless it runs), munged, exim4, mariadb, slurmdbd, slurmctld,
node1..N, mlflow (with mlflow_url: box) and prometheus (with prometheus_url: box), each launched before the hub
and waited for after it, hub, and stop by their recorded PID (never by name) in reverse; `down` then removes the
network it made (deploy/local/parts/nodes.py) and drops the box's claim on the directory (stopped when no other box
needs it).
`stop NODE` shuts a node down with everything running on it; `crash NODE` cuts its power (link down, every
process killed at once), so that Slurm finds it dead and requeues its jobs; `start NODE` brings it back. `crash`
alone cuts the whole box's power: every process of every service (the hub's proxy and services too) and of every
node killed at once, pid files and saved state left as they were; `up` recovers from that. The directory is not
the box's alone: `crash` leaves it running, `start slapd` / `stop slapd` claim it and drop the claim.

Everything lives under ``cfg.state_dir`` (mode 0755: job users must reach the munge socket and slurm.conf):

    (the directory)             slapd, its CA and the demo directory live in cfg.directory_dir, shared by every
                                box on this machine: started by the first that needs it, stopped by the last
                                (deploy/local/parts/directory.py); `status` says whether its logins work
    munge/                      owned by munge: munge.key (0400), munge.socket.2, munged.pid/.log/.seed
    accounting/                 MariaDB's data directory and socket, slurmdbd's database password (0600)
    exim4/exim4.conf, spool/, log/   the box's own exim4: its configuration (listed in /etc/exim4/trusted_configs
                                while exim4 runs), queue and logs; mail goes to box_mail_dir/<user> (/var/mail)
    slurm/slurm.conf, slurmdbd.conf, cgroup.conf, gres.conf, epilog.sh   rewritten from templates/ on every `up`
    slurm/mailprog.sh, jobmail.log   Slurm's MailProg (portal.jobmail, with this box's settings) and its log
    slurm/state/, spool/<node>/ StateSaveLocation, each node's SlurmdSpoolDir
    slurm/fakegpu/<node>/nvidia0..N   FAKE GPUs: character devices 1:3 (/dev/null)
    slurm/*.pid, *.log          Slurm's own PID and log files (slurmd.<node>.log per node)
    gpus/<node>.json, .jsonl    each node's GPU reading and those before it (0700: deploy/local/parts/gpus.py)
    hub/                        the hub's working directory (0700): its database and cookie secret
    mlflow/                     the MLflow server's databases, artifacts and admin (0700; deploy/mlflow_server.py)
    prometheus/                 the Prometheus server's data, token and reader (0700; deploy/prometheus_server.py)
    run/NAME.pid                the PID this script recorded for each service; run/network.json; run/box.lock
    log/NAME.log                each service's stdout and stderr

State (keys, directory data, accounting, Slurm state) is created when missing and never regenerated, so `down`
then `up` gives back the same cluster.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time

from deploy.daemons import descendants
from deploy.local.parts import (
    accounting,
    directory,
    gpus,
    hub,
    mail,
    mlflow,
    munge,
    nodes,
    prometheus,
    reach,
    slapd,
    slurm,
    users,
)
from deploy.local.parts.layout import LOCALHOST, BoxError, Layout, check_traversable, make_dir
from deploy.supervise import Lock, Service, service_pid, start_service, start_services, stop_service
from portal import prometheus_access
from portal.cli import run_reporting
from portal.config import ConfigError, PortalConfig, load
from portal.mlflow_accounts import PREFIX, tracking_uri


def services(cfg: PortalConfig, no_hub: bool = False) -> list[Service]:
    """Every service of the box, in starting order."""
    return [
        munge.service(),
        mail.service(),
        accounting.mariadb_service(),
        accounting.slurmdbd_service(),
        slurm.slurmctld_service(after_start=accounting.sync_accounts),
        *(nodes.node_service(node, slurm.ensure_slurm) for node in nodes.network_of(cfg).nodes),
        *(gpus.service(node) for node in nodes.network_of(cfg).nodes if cfg.slurm_node_gpus),
        *([mlflow.service()] if mlflow.runs_here(cfg) else []),
        *([prometheus.service()] if prometheus.runs_here(cfg) else []),
        *([] if no_hub else [hub.service()]),
    ]


def cmd_up(lay: Layout, no_hub: bool) -> None:
    began = time.monotonic()
    for line in directory.acquire(lay.cfg, lay.root, users.report_sync):
        print(line, flush=True)
    slurm.prepare_cluster(lay)  # first: slurm.conf, and the bridge that every Slurm address of the box is on
    for line in start_services(services(lay.cfg, no_hub), lay):  # MLflow's start beside the hub's
        print(line, flush=True)
    print(reach.report_reach(lay, slapd.DEMO_USERS[0][0]), flush=True)  # fails loudly, naming what to do
    cfg = lay.cfg
    print(f"\nthe box is up ({time.monotonic() - began:.1f} s); state in {lay.root}")
    print(f"hub: {cfg.hub_url}/" if not no_hub else "hub: not started (--no-hub)")
    print(f"slurm: export SLURM_CONF={cfg.slurm_conf_path}")
    print(f"nodes: {', '.join(f'{n.name} ({n.address})' for n in nodes.network_of(cfg).nodes)} on bridge "
          f"{nodes.network_of(cfg).bridge} ({cfg.box_gateway}); e.g. `ip netns exec {cfg.box_node_names()[0]} bash`")
    print(f"ldap: ldap://{LOCALHOST}:{cfg.ldap_port} (StartTLS), ldaps://{LOCALHOST}:{cfg.ldaps_port},"
          f" CA {cfg.ca_file} (the directory in {cfg.directory_dir}, one for every box on this machine)")
    if mlflow.runs_here(cfg):
        print(f"mlflow: {tracking_uri(cfg)} (jobs log there as their owner; users open it in the dashboard at "
              f"{cfg.hub_url}{PREFIX}/)")
    if prometheus.runs_here(cfg):
        print(f"prometheus: {prometheus_access.url(cfg)} scrapes the hub and the portal (its reader's password in "
              f"{prometheus_access.reader_file(cfg)}); admins see its charts at {cfg.hub_url}/services/portal/"
              "operations")
    print(f"mail: exim4 on {LOCALHOST}:{cfg.smtp_port} delivers job e-mail to {cfg.box_mail_dir}/<user> "
          f"(`mail -f {cfg.box_mail_dir}/<user>` reads it)")
    print("demo accounts (user / password: groups):")
    for uid, password, *_ in slapd.DEMO_USERS:
        groups = [name for name, _, members in slapd.DEMO_GROUPS if uid in members]
        print(f"  {uid} / {password}: {', '.join(groups) or '(no group: login refused)'}")


def cmd_down(lay: Layout) -> None:
    """Stop everything and remove the network; a step that fails does not keep the others from running, and the
    failures are reported together at the end."""
    failed = []
    for svc in reversed(services(lay.cfg)):
        try:
            print(stop_service(svc, lay), flush=True)
        except BoxError as err:
            failed.append(str(err))
    try:
        for line in nodes.teardown(lay):
            print(line, flush=True)
    except BoxError as err:
        failed.append(str(err))
    try:
        print(directory.release(lay.cfg.directory_dir, lay.root), flush=True)  # stopped unless another box needs it
    except BoxError as err:
        failed.append(str(err))
    if failed:
        raise BoxError("\n".join(failed))


def cmd_crash(lay: Layout) -> str:
    """A power cut of the whole box: everything it runs gets SIGKILL in one sweep, nothing is told."""
    pids = set()
    for svc in services(lay.cfg):
        pid = service_pid(svc, lay)
        if pid:
            pids.update([pid, *descendants(pid)])
    for node in nodes.own_nodes(lay):
        pids.update(nodes.namespace_pids(node.name))
    pids.discard(os.getpid())
    left = nodes.signal_all(sorted(pids), signal.SIGKILL, nodes.KILLED_GONE_S)
    if left:
        raise BoxError("crash: still there after SIGKILL: " + "; ".join(map(nodes.describe_process, left)))
    return f"box crashed: {len(pids)} processes killed at once; `up` brings it back"


def cmd_status(lay: Layout) -> None:
    network = nodes.network_of(lay.cfg)
    addresses = {node.name: node.address for node in network.nodes}
    ctld_up = nodes.bridge_up(lay) and slurm.slurmctld_ready(lay) is None
    print(directory.status_line(lay.cfg, lay.root))
    for svc in services(lay.cfg):
        pid = service_pid(svc, lay)
        line = f"{svc.name}: {f'running ({pid})' if pid else 'stopped'}"
        if svc.name in addresses:
            state = nodes.node_state(lay, svc.name) if ctld_up else "unknown (slurmctld is down)"
            line += f", {addresses[svc.name]}, slurm: {state or 'unknown'}"
        print(line)


def main(argv: list[str] | None = None) -> int:
    try:
        cfg = load()
    except ConfigError as err:
        print(f"box.py: {err}", file=sys.stderr)
        return 2
    names = ["slapd", *(svc.name for svc in services(cfg))]  # slapd: this box's claim on the shared directory
    parser = argparse.ArgumentParser(prog="python -m deploy.local.box",
                                     description="The Data Scientist Portal's cluster in a box.")
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="create what is missing, start what is stopped")
    up.add_argument("--no-hub", action="store_true", help="everything but the hub")
    sub.add_parser("down", help="stop every service in reverse order, then remove the nodes' network")
    sub.add_parser("status", help="one line per service; nodes with their address and Slurm state")
    for name in ("start", "stop"):
        sub.add_parser(name, help=f"{name} one service or node").add_argument("name", choices=names)
    sub.add_parser("crash", help="cut a node's power (link down, every process on it killed), or with no node "
                   "the whole box's: every process of it killed at once").add_argument(
        "name", nargs="?", choices=list(cfg.box_node_names()))
    args = parser.parse_args(argv)
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `box.py status | head` ends quietly

    if os.geteuid() != 0:
        print("box.py: run as root (it creates users, devices and network namespaces, and runs daemons)",
              file=sys.stderr)
        return 2
    lay = Layout(cfg)
    by_name = {svc.name: svc for svc in services(cfg)}

    def run() -> None:
        if args.command == "status":
            cmd_status(lay)
            return
        make_dir(lay.root, 0o755)
        check_traversable(lay.root)
        make_dir(lay.run, 0o755)
        make_dir(lay.log, 0o755)
        with Lock(lay):
            if args.command == "up":
                cmd_up(lay, args.no_hub)
            elif args.command == "down":
                cmd_down(lay)
            elif args.command == "start" and args.name == "slapd":
                print("\n".join(directory.acquire(cfg, lay.root, users.report_sync)))
            elif args.command == "stop" and args.name == "slapd":
                print(directory.release(cfg.directory_dir, lay.root))
            elif args.command == "start":
                print("\n".join(start_service(by_name[args.name], lay)))
            elif args.command == "stop":
                print(stop_service(by_name[args.name], lay))
            elif args.name is None:
                print(cmd_crash(lay))
            else:
                print(nodes.crash(lay, next(n for n in nodes.network_of(cfg).nodes if n.name == args.name)))

    return run_reporting(f"box.py {args.command}", run, BoxError)


if __name__ == "__main__":
    sys.exit(main())
