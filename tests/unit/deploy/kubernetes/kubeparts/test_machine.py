"""What deploy/kubernetes ships, checked offline: the Helm values wire classes that exist, and every built-in
kind validates strictly (kubernetes-validate) for the Kubernetes versions docs/admin-guide.md claims; the nodes keep
their state in their own dirs, and the last box's teardown (kubeparts/machine.py) puts the machine back, leaving
what is another program's. The real thing: tests/kubernetes/test_nodes.py."""

from __future__ import annotations

import importlib
import json
import re
import types
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from traitlets.config import Config

from deploy.kubernetes.kubeparts import api as kube_api
from deploy.kubernetes.kubeparts import machine, nodes
from deploy.kubernetes.kubeparts.layout import KubeBox
from deploy.supervise import BoxError
from portal.config import PortalConfig
from portal.scheduler.kubernetes.manifests import user_namespace_objects
from tests.conftest import REPO
from tests.unit.helpers import KUBERNETES_VERSIONS

DEPLOY = REPO / "deploy" / "kubernetes"

BUILT_IN = ("rbac.yaml",)  # mpijob-crd.yaml is a CustomResourceDefinition: checked by the real API server


def documents(name: str) -> list[dict]:
    return [d for d in yaml.safe_load_all((DEPLOY / name).read_text()) if d]


def resolve(dotted: str):
    module, _, name = dotted.rpartition(".")
    return getattr(importlib.import_module(module), name)


def test_the_helm_values_wire_our_authenticator_spawner_and_dashboard(monkeypatch):
    values = yaml.safe_load((DEPLOY / "values.yaml").read_text())
    for name, value in values["hub"]["extraEnv"].items():
        monkeypatch.setenv(name, str(value))
    c = Config()
    c.JupyterHub.services = []
    c.JupyterHub.load_roles = []
    for snippet in values["hub"]["extraConfig"].values():
        exec(compile(snippet, "values.yaml:hub.extraConfig", "exec"), {"c": c})
    assert resolve(c.JupyterHub.authenticator_class).__name__ == "PortalLDAPAuthenticator"
    assert resolve(c.JupyterHub.spawner_class).__name__ == "PortalKubeSpawner"
    (service,) = c.JupyterHub.services
    assert service["name"] == "portal" and service["environment"]["DSPORTAL_SCHEDULER"] == "kubernetes"
    ports = {p["port"] for p in values["hub"]["service"]["extraPorts"]}
    assert service["url"].endswith(":8090") and 8090 in ports


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_every_built_in_manifest_we_ship_validates_strictly(version):
    shipped = [d for name in BUILT_IN for d in documents(name)]
    made = user_namespace_objects(PortalConfig(), "alice", 4)
    assert len(shipped) >= 4
    for document in (*shipped, *made):
        kubernetes_validate.validate(document, version, strict=True)


# --- what the box's nodes change on the machine, and how the last box puts it back (kubeparts/machine.py) --------

KUBELET_SETS = {"vm/overcommit_memory": "1", "kernel/panic": "10", "kernel/panic_on_oops": "1"}


@pytest.fixture
def a_machine(tmp_path, monkeypatch):
    """A machine in tmp_path: its /proc/sys with the sysctls as found, no /var/lib/cni nor /var/log/pods (the box
    makes them as mount points), and the box's record under its own /run."""
    sysctls = tmp_path / "proc" / "sys"
    for name, value in {"vm/overcommit_memory": "0", "kernel/panic": "1", "kernel/panic_on_oops": "0"}.items():
        (sysctls / name).parent.mkdir(parents=True, exist_ok=True)
        (sysctls / name).write_text(f"{value}\n")
    monkeypatch.setattr(machine, "SYSCTLS", sysctls)
    monkeypatch.setattr(machine, "MACHINE", tmp_path / "run" / "dsportal-kubebox")
    monkeypatch.setattr(machine, "MACHINE_LOCK", tmp_path / "run" / "lock" / "dsportal-kubebox.lock")
    monkeypatch.setattr(machine, "PRIVATE_PATHS", (str(tmp_path / "var/log/pods"), str(tmp_path / "var/lib/cni")))
    return tmp_path


def run_a_box(root: Path, box_id: str = "box1") -> Path:
    """claim as a box's first node does, then the kubelet's sysctls; the node's private root (what node.sh binds)."""
    machine.claim(box_id, root / "state")
    for name, value in KUBELET_SETS.items():
        (machine.SYSCTLS / name).write_text(value)
    private = root / "state" / "nodes" / "kube-node1" / "private"
    results = private / root.relative_to("/") / "var/lib/cni" / "results"
    results.mkdir(parents=True)
    (results / "kube-node1-pods-0a1b-eth0").write_text("{}")  # what libcni writes, in the node's own copy
    return private


def test_an_empty_made_dir_is_removed_and_the_sysctls_put_back(a_machine):
    private = run_a_box(a_machine)
    assert (a_machine / "var/lib/cni").is_dir() and (machine.MACHINE / "before.json").exists()
    done = machine.release("box1", [private])
    assert done.left == [], done.left
    assert not (a_machine / "var/lib/cni").exists() and not (a_machine / "var/log/pods").exists()
    assert {name: (machine.SYSCTLS / name).read_text().strip() for name in KUBELET_SETS} == {
        "vm/overcommit_memory": "0", "kernel/panic": "1", "kernel/panic_on_oops": "0"}
    (line,) = done.lines
    assert "restored vm.overcommit_memory=0, kernel.panic=1, kernel.panic_on_oops=0" in line, line
    assert f"removed {a_machine / 'var/lib/cni'}, {a_machine / 'var/log/pods'}" in line, line
    assert not machine.MACHINE.exists()  # before.json and boxes/: the next box records afresh


def test_a_made_dir_holding_podmans_networks_is_left_and_said_and_the_rest_released(a_machine):
    private = run_a_box(a_machine)
    podman = a_machine / "var/lib/cni/networks/podman"  # podman's containers, on the machine, while the box ran
    podman.mkdir(parents=True)
    (podman / "last_reserved_ip.0").write_text("10.88.0.2")
    done = machine.release("box1", [private])
    (left,) = done.left
    assert str(left) == f"left {a_machine / 'var/lib/cni'}: holds networks/podman, not the box's"
    assert not left.ours and done.ours == []  # `down` says so, and does not fail for it
    assert (podman / "last_reserved_ip.0").read_text() == "10.88.0.2"  # untouched
    assert not (a_machine / "var/log/pods").exists()  # the other made dir still went
    assert (machine.SYSCTLS / "kernel/panic").read_text().strip() == "1"
    assert not machine.MACHINE.exists()  # the record released all the same: /var/lib/cni is podman's now


def test_a_made_dir_holding_what_the_nodes_write_is_the_boxs_own_leftover(a_machine):
    private = run_a_box(a_machine)
    leaked = a_machine / "var/lib/cni/results"  # as if a node's bind had been missing
    leaked.mkdir(parents=True)
    (leaked / "kube-node1-pods-0a1b-eth0").write_text("{}")
    done = machine.release("box1", [private])
    (left,) = done.ours
    assert left.what == str(a_machine / "var/lib/cni") and "results/kube-node1-pods-0a1b-eth0" in left.why
    with pytest.raises(machine.LeftBehind) as raised:  # what kubebox.down raises: the box's own is left
        raise machine.LeftBehind(done)
    assert str(left) in raised.value.lines and "machine: restored" in raised.value.lines[0]


def test_only_the_last_box_releases_the_machine(a_machine):
    private = run_a_box(a_machine, "box1")
    machine.claim("box2", a_machine / "other")  # found the sysctls as the kubelet left them: not recorded again
    assert machine.release("box1", [private]).lines == []
    assert (a_machine / "var/lib/cni").is_dir() and (machine.SYSCTLS / "kernel/panic").read_text() == "10"
    assert machine.release("box2", []).left == []
    assert (machine.SYSCTLS / "kernel/panic").read_text().strip() == "1" and not machine.MACHINE.exists()


def test_a_failed_step_is_a_leftover_and_the_next_step_still_runs():
    done = machine.Teardown()

    def stuck() -> str:
        raise BoxError("kubet-node1: still there 30 s after SIGKILL: pid 42 state D: containerd-shim")
    done.step("kubet-node1", stuck)
    done.step("etcd", lambda: "etcd: stopped (pid 7)")
    assert done.lines == ["etcd: stopped (pid 7)"]
    assert done.report()[-1] == "left kubet-node1: kubet-node1: still there 30 s after SIGKILL: pid 42 state D: " \
                                "containerd-shim"
    assert done.ours == done.left


def test_the_verdict_on_a_made_dir():
    assert machine.made_dir_verdict("/var/lib/cni", [], [], ["results/x"]) is None
    podman = [f"results/podman-{i}-eth0" for i in range(6)]
    foreign = machine.made_dir_verdict("/var/lib/cni", podman, podman, ["results/x"])
    assert not foreign.ours and foreign.why.endswith("results/podman-3-eth0 and 2 more, not the box's"), foreign.why


def test_an_empty_directory_of_the_same_name_is_not_the_boxs(a_machine):
    """libcni leaves an empty results/ behind, podman's as the nodes' (seen after a real session): a name alone
    is no evidence, so the dir is left as another program's and `down` does not fail."""
    private = run_a_box(a_machine)
    (private / a_machine.relative_to("/") / "var/lib/cni/results/kube-node1-pods-0a1b-eth0").unlink()
    (a_machine / "var/lib/cni/results").mkdir()
    (a_machine / "var/lib/cni/networks/podman").mkdir(parents=True)
    (a_machine / "var/lib/cni/networks/podman/lock").touch()
    done = machine.release("box1", [private])
    assert [str(left) for left in done.left] == [
        f"left {a_machine / 'var/lib/cni'}: holds networks/podman, results, not the box's"]
    assert done.ours == [] and not machine.MACHINE.exists()


def test_node_sh_binds_exactly_the_hard_coded_paths():
    loop = re.search(r"^for path in (.*); do$", (DEPLOY / "node.sh").read_text(), re.MULTILINE)
    assert tuple(loop.group(1).split()) == machine.PRIVATE_PATHS == tuple(machine.HARD_CODED_PATHS)


def test_the_nodes_keep_their_cni_and_kubelet_state_in_their_own_dir(tmp_path):
    box = KubeBox(tmp_path)
    node = box.node_network.nodes[0]
    own = box.node_dir(node.name)
    (ipam,) = [plugin["ipam"] for plugin in json.loads(nodes.cni_template(box, node))["plugins"]]
    assert ipam["type"] == "host-local" and Path(ipam["dataDir"]).is_relative_to(own)  # not /var/lib/cni/networks
    command = nodes.node_command(box, node)
    assert f"--root-dir={own / 'kubelet'}" in command and f"--cert-dir={own / 'kubelet' / 'pki'}" in command
    config = nodes.containerd_config(box, node)
    assert f'conf_dir = "{own / "cni"}"' in config and f'state = "{own / "containerd-state"}"' in config


def test_a_nodes_cgroup_gets_the_boxs_cpu_weight_only_where_the_box_sets_one(tmp_path):
    """cpu.shares in the cpu hierarchy (a kernel file, here a plain one); the other hierarchies have none."""
    for hierarchy, shares in (("cpu", 512), ("memory", 512), ("cpu2", 0)):
        (tmp_path / hierarchy / "kubet-node1").mkdir(parents=True)
        if hierarchy != "memory":
            (tmp_path / hierarchy / "kubet-node1" / "cpu.shares").write_text("1024")
        nodes._make_cgroup(tmp_path / hierarchy / "kubet-node1", shares)
    assert (tmp_path / "cpu" / "kubet-node1" / "cpu.shares").read_text() == "512"
    assert (tmp_path / "cpu2" / "kubet-node1" / "cpu.shares").read_text() == "1024"  # 0: left as the kernel made it
    assert not (tmp_path / "memory" / "kubet-node1" / "cpu.shares").exists()


class FakeKind:
    """One kind's handle as kubeparts.api.apply sees it, against an API server like v1.20's: a create of an object
    that exists is refused by what it validates first (a Service's fixed nodePort: 422), not always with 409."""

    def __init__(self, existing: dict | None = None):
        self.existing, self.calls = existing, []

    def get(self, name, namespace=None):
        self.calls.append("get")
        if self.existing is None:
            raise kube_api.NotFoundError(kube_api.ApiException(status=404, reason="Not Found"))
        return types.SimpleNamespace(metadata=types.SimpleNamespace(resourceVersion="7"))

    def create(self, body, namespace=None):
        self.calls.append("create")
        if self.existing is not None:
            raise kube_api.DynamicApiError(kube_api.ApiException(status=422, reason="port is already allocated"))
        self.existing = body

    def replace(self, body, namespace=None):
        self.calls.append(("replace", body["metadata"]["resourceVersion"]))


def fake_api(kind: FakeKind):
    return types.SimpleNamespace(resources=types.SimpleNamespace(get=lambda **_: kind))


def test_apply_creates_what_is_missing_and_never_creates_what_exists():
    proxy = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "proxy-public", "namespace": "dsportal"},
             "spec": {"type": "NodePort", "ports": [{"port": 80, "nodePort": 30080}]}}
    missing = FakeKind()
    assert kube_api.apply(fake_api(missing), proxy, replaceable=()) == "Service dsportal/proxy-public: created"
    assert missing.calls == ["get", "create"]
    # A second `up` (or one after a crash): the Service is there, holding its nodePort.
    there = FakeKind(existing=proxy)
    assert kube_api.apply(fake_api(there), proxy, replaceable=()) == "Service dsportal/proxy-public: exists"
    assert there.calls == ["get"]
    assert kube_api.apply(fake_api(there), proxy, replaceable=("Service",)) == "Service dsportal/proxy-public: updated"
    assert there.calls[-1] == ("replace", "7")
