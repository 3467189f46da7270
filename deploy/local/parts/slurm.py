"""Slurm's configuration for the box's nodes, their FAKE GPUs, and slurmctld on the login host."""

from __future__ import annotations

import os
import re
import shlex
import stat
import subprocess
import sys
from pathlib import Path

from deploy.local.parts.layout import TEMPLATES, Layout, make_dir, render
from deploy.local.parts.nodes import Node, ensure_bridge, network_of
from deploy.supervise import Service, write_if_changed

SLURMD_TIMEOUT_S = 20  # see slurm.conf: how long a silent node takes to be declared down


def fake_gpus(lay: Layout, node: Node) -> str:
    """The node's GPU device files (made once) as gres.conf names them."""
    gpu_dir = make_dir(lay.slurm / "fakegpu" / node.name)
    for i in range(lay.cfg.slurm_node_gpus):
        device = gpu_dir / f"nvidia{i}"
        if not device.exists():
            # FAKE GPUs: Slurm insists on character devices; 1:3 is /dev/null.
            os.mknod(device, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
            os.chmod(device, 0o666)  # like /dev/null, whatever the umask
    gpus = lay.cfg.slurm_node_gpus
    return f"{gpu_dir}/nvidia[0-{gpus - 1}]" if gpus > 1 else f"{gpu_dir}/nvidia0"


def node_line(lay: Layout, node: Node) -> str:
    cfg = lay.cfg
    gres = f" Gres=gpu:{cfg.slurm_node_gpus}" if cfg.slurm_node_gpus else ""
    return (f"NodeName={node.name} NodeAddr={node.address} CPUs={cfg.slurm_node_cpus} Boards=1 SocketsPerBoard=2 "
            f"CoresPerSocket={max(cfg.slurm_node_cpus // 2, 1)} ThreadsPerCore=1 "
            f"RealMemory={cfg.slurm_node_memory_mb}{gres} State=UNKNOWN")


def ensure_slurm(lay: Layout) -> None:
    """Slurm's directories, every node's fake GPU devices and spool, and the config files (rewritten when the
    settings changed)."""
    cfg, slurm = lay.cfg, make_dir(lay.slurm)
    state = make_dir(slurm / "state", 0o700)
    nodes = network_of(cfg).nodes
    for node in nodes:
        make_dir(slurm / "spool" / node.name)  # slurmd does not create its spool
    gpu_files = {node.name: fake_gpus(lay, node) for node in nodes} if cfg.slurm_node_gpus else {}
    (slurm / "fakegpu" / "README").write_text(
        "FAKE GPUs for the cluster in a box: character devices 1:3 (/dev/null), one directory per node.\n")
    conf_dir = cfg.slurm_conf_path.parent
    write_if_changed(cfg.slurm_conf_path, render(
        "slurm.conf", cluster_name=cfg.cluster_name, gateway=cfg.box_gateway, slurmctld_port=cfg.slurmctld_port,
        slurmd_port=cfg.slurmd_port, slurmdbd_port=cfg.slurmdbd_port, munge_socket=lay.munge_socket,
        state_save=state, slurm_dir=slurm, slurmd_timeout=SLURMD_TIMEOUT_S,
        node_lines="\n".join(node_line(lay, node) for node in nodes), node_names=",".join(node.name for node in nodes)))
    write_if_changed(conf_dir / "cgroup.conf", render("cgroup.conf"))
    write_if_changed(slurm / "epilog.sh", (TEMPLATES / "epilog.sh").read_text(), mode=0o755)
    write_if_changed(slurm / "mailprog.sh", mailprog(slurm), mode=0o700)
    write_if_changed(conf_dir / "gres.conf", render(
        "gres.conf", gpu_dir=slurm / "fakegpu",
        gpu_lines="\n".join(f"NodeName={name} Name=gpu File={files}" for name, files in gpu_files.items())))


def mailprog(slurm_dir: Path) -> str:
    """Slurm's MailProg for the box: portal.jobmail with this box's settings. slurmctld runs it with Slurm's
    variables only, so the settings `up` was given (DSPORTAL_CONFIG, DSPORTAL_*) are written into it; it is
    root's alone (0700), as a DSPORTAL_LDAP_SEARCH_PASSWORD may be among them."""
    settings = sorted((k, v) for k, v in os.environ.items() if k.startswith("DSPORTAL_"))
    exports = "".join(f"export {name}={shlex.quote(value)}\n" for name, value in settings
                      if re.fullmatch(r"DSPORTAL_[A-Z0-9_]+", name))
    log = shlex.quote(str(slurm_dir / "jobmail.log"))
    return ("#!/bin/sh\n# Slurm's MailProg for the cluster in a box: the portal's e-mail at a job's end. Written by "
            "deploy/local on every `up`.\n" + exports +
            f"cd / && exec {shlex.quote(sys.executable)} -m portal.jobmail \"$@\" >>{log} 2>&1\n")


def slurmctld_ready(lay: Layout) -> str | None:
    try:
        ping = subprocess.run([lay.slurm_cmd("scontrol"), "ping"], env=lay.slurm_env, text=True,
                              capture_output=True, timeout=10)
    except subprocess.TimeoutExpired:
        return "scontrol ping did not answer within 10 s"
    return None if "is UP" in ping.stdout else (ping.stdout + ping.stderr).strip()


def prepare_cluster(lay: Layout) -> None:
    """What every Slurm daemon and client of the box needs first: the config files, and the bridge that carries
    every Slurm address (without it they would go to the default route, off this machine)."""
    ensure_slurm(lay)
    ensure_bridge(lay)


def slurmctld_service(after_start) -> Service:
    """slurmctld; `after_start` syncs the accounts (they need the cluster's name from slurmctld)."""
    return Service(
        "slurmctld", "slurmctld", prepare_cluster,
        lambda lay: [lay.slurm_daemon("slurmctld"), "-D", "-f", str(lay.cfg.slurm_conf_path)],
        slurmctld_ready, 30, lambda lay: [("0.0.0.0", lay.cfg.slurmctld_port)],
        env=lambda lay: lay.slurm_env, extra_logs=lambda lay: [lay.slurm / "slurmctld.log"],
        after_start=after_start)
