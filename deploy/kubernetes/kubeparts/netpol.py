"""The box's stand-in for a CNI plugin's NetworkPolicy enforcer: Debian packages none (no Calico, Cilium,
kube-router...), and its CNI plugins (bridge, host-local, portmap) ignore NetworkPolicy objects. The objects stay
the source of truth, as on any cluster; this controller enforces them with each node's own firewall.

It watches Pods, Namespaces and NetworkPolicies (the `kubernetes` client, as the box's admin) and, on every change
(and every RESYNC_S), writes each node's rules (kubeparts/netpol_rules.py) into the filter table of the node's
network namespace with `iptables-restore --noflush`, keeping FORWARD's first rule a jump to its chain (kube-proxy
inserts its own there). It logs what it programs, one line per node and change ("kube-node1: 3 pods fenced: ...").
Run by the box as the service `netpol` (started after the nodes, stopped before them); once stopped, `teardown`
removes the jump and every chain of its own from every node:

    python -m deploy.kubernetes.kubeparts.netpol --state DIR --port N --name NAME --network CIDR --nodes N

run/netpol.json says what is programmed now ({"pid", "nodes": {node: {"fenced": [...], "notes": [...]}}}): the
tests wait on it, and `ready` is its PID being the service's.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from deploy.kubernetes.kubeparts.layout import HERE, KubeBox
from deploy.kubernetes.kubeparts.netpol_rules import CHAIN, namespace_labels, node_program, our_chains, pods_of, removal
from deploy.netns import NETNS_DIR
from deploy.supervise import BoxError, Service

MODULE = "deploy.kubernetes.kubeparts.netpol"
RESYNC_S = 5.0  # also puts the FORWARD jump first again when kube-proxy inserted its own above it
SETTLE_S = 0.2  # a burst of changes (a job's pods) is programmed once
WATCH_S = 300  # each watch is made again after this (the API server ends it anyway)
BRIDGE_FILTER = "/proc/sys/net/bridge/bridge-nf-call-iptables"  # pods of one node talk across its bridge
READY_S = 30
SBIN = "/usr/sbin"  # iptables (Debian's iptables package, which build-kubernetes.sh installs; kube-proxy's too)


def status_file(box: KubeBox) -> Path:
    return box.path("run", "netpol.json")


def _in_node(node: str, *command: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    """A command in the node's network namespace (iptables and friends by their Debian path: root's PATH may
    lack /usr/sbin)."""
    program = f"{SBIN}/{command[0]}" if command[0].startswith("iptables") else command[0]
    return subprocess.run(["nsenter", f"--net={NETNS_DIR / node}", program, *command[1:]], input=stdin, text=True,
                          capture_output=True, check=check, timeout=30)


def _chains(node: str) -> list[str]:
    return our_chains(_in_node(node, "iptables-save", "-t", "filter").stdout)


def _jump_first(node: str) -> None:
    """FORWARD's first rule our jump, and the only one (kube-proxy inserts its chains at the top)."""
    rules = [line for line in _in_node(node, "iptables", "-S", "FORWARD").stdout.splitlines()
             if line.startswith("-A FORWARD")]
    ours = f"-A FORWARD -j {CHAIN}"
    if rules[:1] == [ours] and rules.count(ours) == 1:
        return
    while _in_node(node, "iptables", "-D", "FORWARD", "-j", CHAIN, check=False).returncode == 0:
        pass
    _in_node(node, "iptables", "-I", "FORWARD", "1", "-j", CHAIN)


def _bridge_filtered(node: str) -> str:
    """Bridged packets (pod to pod on one node) through iptables: the default in a new namespace when the
    br_netfilter module is loaded; a note otherwise."""
    found = _in_node(node, "cat", BRIDGE_FILTER, check=False)
    if found.returncode != 0:
        return f"{BRIDGE_FILTER} is missing (no br_netfilter): pods of one node are not fenced from each other"
    if found.stdout.strip() != "1":
        _in_node(node, "sh", "-c", f"echo 1 > {BRIDGE_FILTER}")
    return ""


def program(node: str, text: str, chains: list[str]) -> None:
    """Write one node's rules, remove the chains it no longer has, and put the jump first."""
    present = _chains(node)
    _in_node(node, "iptables-restore", "--noflush", stdin=text)
    stale = removal(present, chains)
    if stale:
        _in_node(node, "iptables-restore", "--noflush", stdin=stale)
    _jump_first(node)


def teardown(box: KubeBox) -> None:
    """The jump and every chain of ours, from every node whose namespace is there, said in the controller's log;
    BoxError naming what is left."""
    done, left = [], []
    for node in box.node_network.nodes:
        if not (NETNS_DIR / node.name).exists():
            continue
        try:
            while _in_node(node.name, "iptables", "-D", "FORWARD", "-j", CHAIN, check=False).returncode == 0:
                pass
            chains = _chains(node.name)
            if chains:
                _in_node(node.name, "iptables-restore", "--noflush", stdin=removal(chains, []))
            done.append(f"{node.name} ({len(chains)} chains)")
        except (subprocess.SubprocessError, OSError) as err:
            left.append(f"{node.name}: {getattr(err, 'stderr', '') or err}")
    status_file(box).unlink(missing_ok=True)
    box.log_file("netpol").parent.mkdir(parents=True, exist_ok=True)
    with box.log_file("netpol").open("a") as log:
        log.write(f"{time.strftime('%H:%M:%S')} teardown: rules removed from {', '.join(done) or 'no node'}"
                  + (f"; left on {'; '.join(left)}" if left else "") + "\n")
    if left:
        raise BoxError(f"netpol: rules left on {'; '.join(left)}")


class Controller:
    """Watches the objects, programs the nodes; `run` until SIGTERM."""

    def __init__(self, box: KubeBox, log: Callable[[str], None]) -> None:
        from kubernetes import client as k8s

        from deploy.kubernetes.kubeparts.api import api_client
        from deploy.kubernetes.kubeparts.identities import read_tokens

        api = api_client(box, read_tokens(box)["admin"])
        self.box, self.log = box, log
        self.core, self.net = k8s.CoreV1Api(api), k8s.NetworkingV1Api(api)
        self.changed, self.stopping = threading.Event(), threading.Event()
        self.applied: dict[str, tuple[str, str]] = {}  # node -> (its rules, its note) as last written

    def watch(self, lister: Callable[..., Any]) -> None:
        from kubernetes import watch

        while not self.stopping.is_set():
            try:
                for _ in watch.Watch().stream(lister, timeout_seconds=WATCH_S):
                    self.changed.set()
            except Exception as err:  # noqa: BLE001  (the API server restarting: any transport error)
                self.log(f"watch {lister.__name__}: {type(err).__name__}: {str(err)[:200]}; again in 1 s")
                self.changed.set()
                time.sleep(1)

    def objects(self) -> tuple[list[dict], list, dict[str, dict[str, str]]]:
        plain = self.core.api_client.sanitize_for_serialization
        policies = plain(self.net.list_network_policy_for_all_namespaces())["items"]
        pods = pods_of(plain(self.core.list_pod_for_all_namespaces())["items"])
        return policies, pods, namespace_labels(plain(self.core.list_namespace())["items"])

    def once(self) -> None:
        policies, pods, namespaces = self.objects()
        report: dict[str, Any] = {}
        for node in self.box.node_network.nodes:
            if not (NETNS_DIR / node.name).exists():
                continue
            made = node_program(node.name, policies, pods, namespaces)
            note = _bridge_filtered(node.name)
            if self.applied.get(node.name) != (made.text, note):
                program(node.name, made.text, made.chains)
                self.applied[node.name] = (made.text, note)
                self.log(f"{node.name}: {len(made.fenced)} pods fenced"
                         + (f": {', '.join(made.fenced)}" if made.fenced else "")
                         + f" ({sum(line.startswith('-A ') for line in made.text.splitlines())} rules)"
                         + "".join(f"; {line}" for line in [*made.notes, *([note] if note else [])]))
            else:
                _jump_first(node.name)
            report[node.name] = {"fenced": made.fenced, "notes": made.notes + ([note] if note else [])}
        temporary = status_file(self.box).with_suffix(".tmp")
        temporary.write_text(json.dumps({"pid": os.getpid(), "at": time.time(), "nodes": report}, indent=1) + "\n")
        temporary.replace(status_file(self.box))

    def run(self) -> None:
        signal.signal(signal.SIGTERM, lambda *_: (self.stopping.set(), self.changed.set()))
        for lister in (self.core.list_pod_for_all_namespaces, self.core.list_namespace,
                       self.net.list_network_policy_for_all_namespaces):
            threading.Thread(target=self.watch, args=(lister,), daemon=True).start()
        self.changed.set()
        while not self.stopping.is_set():
            self.changed.wait(RESYNC_S)
            if self.stopping.is_set():
                break
            time.sleep(SETTLE_S)
            self.changed.clear()
            try:
                self.once()
            except Exception as err:  # noqa: BLE001  (the API server away, a node going: said, tried again)
                self.log(f"not programmed: {type(err).__name__}: {str(getattr(err, 'stderr', '') or err)[:300]}")
                self.applied.clear()
                time.sleep(1)
                self.changed.set()
        self.log("stopping (the box's `down` removes the rules)")


def command(box: KubeBox) -> list[str]:
    return [sys.executable, "-m", MODULE, "--state", str(box.state_dir), "--port", str(box.api_port),
            "--name", box.name, "--network", box.network, "--nodes", str(box.nodes)]


def _ready(box: KubeBox) -> str | None:
    try:
        written = json.loads(status_file(box).read_text())
        pid = int(box.pid_file("netpol").read_text())
    except (OSError, ValueError):
        return "no rules programmed yet"
    return None if written.get("pid") == pid else "no rules programmed yet"


def _prepare(box: KubeBox) -> None:
    for program_name in ("iptables", "iptables-restore", "iptables-save"):
        if not os.access(f"{SBIN}/{program_name}", os.X_OK):
            raise BoxError(f"netpol: {SBIN}/{program_name} is missing; deploy/kubernetes/build-kubernetes.sh "
                           "installs it (Debian's iptables)")


def service() -> Service:
    repo = str(HERE.parents[1])
    return Service("netpol", MODULE, _prepare, command, _ready, READY_S,
                   env=lambda box: {**os.environ, "PYTHONPATH": repo}, after_stop=teardown)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=f"python -m {MODULE}", description=__doc__.split("\n\n")[0])
    parser.add_argument("--state", type=Path, required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--network", required=True)
    parser.add_argument("--nodes", type=int, required=True)
    args = parser.parse_args(argv)
    box = KubeBox(args.state, args.port, name=args.name, network=args.network, nodes=args.nodes)
    Controller(box, lambda line: print(f"{time.strftime('%H:%M:%S')} {line}", flush=True)).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
