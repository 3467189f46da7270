"""The scheduler contract (portal.scheduler.protocol.Scheduler), one suite over every registered scheduler: each
implements every method with the protocol's arguments, says in the protocol's docstring whether it blocks, renders a
job without asking its cluster, answers usage or says it keeps no accounting, and, where it asks a service that does
not answer, fails as that scheduler's SchedulerUnavailable naming it; its limits are what the submit form and the
spawn form show. A toy scheduler (contract_helpers) passes the same checks. A job's life on each (submit, list, load,
state, cancel, the owner checks, a cluster that does not answer) is test_contract_jobs.py. (The box journeys drive
the real ones end to end: tests/kubernetes/test_dashboard_journeys.py.)"""

from __future__ import annotations

import asyncio
import inspect
import re
import socket
import types
from datetime import datetime
from typing import Any

import pytest
from jupyterhub.spawner import LocalProcessSpawner

from portal import errors
from portal.config import PortalConfig
from portal.records.limits import JobLimits
from portal.scheduler.errors import NoAccounting
from portal.scheduler.protocol import KeepsRecords, Scheduler
from portal.scheduler.registry import SCHEDULERS, scheduler_class, scheduler_for
from portal.scheduler.usage import UsageReport
from portal.service.submit_form import form_fields
from spawners.options import ServerOptionsMixin
from tests.conftest import REPO
from tests.slurm_answers import sacct_json, sacct_run
from tests.unit.helpers import parse_spec, scheduler_answering, squeue_free
from tests.unit.portal.scheduler.contract_helpers import register_toy

CONTRACT = [name for name, value in vars(Scheduler).items() if inspect.isfunction(value) and not name.startswith("_")]
KEPT_RECORDS = [name for name, value in vars(KeepsRecords).items() if inspect.isfunction(value)
                and not name.startswith("_")]
ATTRIBUTES = ("name", "job_ids", "records_in_home", "queue_in_snapshot", "sweeps", "state_files")


@pytest.fixture(params=[*SCHEDULERS, "toy"])
def registered(request, monkeypatch) -> str:
    """Each registered scheduler's name; "toy" registers the toy scheduler (contract_helpers) first."""
    if request.param == "toy":
        register_toy(monkeypatch)
    return request.param


def refuse_every_command(argv) -> str:
    raise AssertionError(f"the contract says this asks nothing, but it ran {list(argv)}")


def test_the_contract_has_every_method_the_page_and_the_docs_name():
    assert {"person", "snapshot", "limits", "render", "submit", "state", "cancel", "logs", "usage"} <= set(CONTRACT)
    assert KEPT_RECORDS == ["records", "load", "records_stamp"]


def test_each_method_of_the_contract_says_its_arguments_errors_and_whether_it_blocks():
    for name in (*CONTRACT, *KEPT_RECORDS):
        method = getattr(KeepsRecords, name)
        doc = inspect.getdoc(method) or ""
        assert re.search(r"\b(Blocks|Pure)\b", doc), f"Scheduler.{name}: its docstring says not whether it blocks"
        source = inspect.getsource(method)
        assert not source.rstrip().endswith("..."), f"Scheduler.{name} has no contract, only `...`"


def test_the_architecture_page_lists_every_method_of_the_contract():
    page = (REPO / "docs" / "architecture.md").read_text()
    section = page[page.index("- **A scheduler**"):page.index("- **A training program**")]
    missing = [name for name in (*CONTRACT, *KEPT_RECORDS) if f"`{name}`" not in section]
    assert not missing and "..." not in section, f"docs/architecture.md, 'Where to add': missing {missing}"


def test_each_scheduler_implements_the_contract_with_its_arguments(registered):
    cls = scheduler_class(registered)
    made = scheduler_answering(PortalConfig(), registered, refuse_every_command)
    for attribute in ATTRIBUTES:
        assert hasattr(made, attribute), f"{registered}: no {attribute}"
    assert made.name == registered
    assert cls.job_ids.pattern.startswith("^") and cls.job_ids.pattern.endswith(r"\Z"), registered
    methods = CONTRACT + ([] if cls.records_in_home else KEPT_RECORDS)
    for name in methods:
        wanted = list(inspect.signature(getattr(KeepsRecords, name)).parameters)
        found = list(inspect.signature(getattr(cls, name)).parameters)
        assert found == wanted, f"{registered}.{name}{found}: the contract's arguments are {wanted}"


def test_a_job_renders_on_each_scheduler_without_asking_it(registered):
    scheduler = scheduler_answering(PortalConfig(), registered, refuse_every_command)
    user = scheduler.person("alice", ["gpu-users"])
    text = scheduler.render(parse_spec(nodes=1, gpus_per_node=0, epochs=1), user)
    assert "chexnet" in text and len(text) > 500, (registered, text[:300])
    configured = scheduler.configured_limits(user)
    assert configured is None or isinstance(configured, JobLimits)


def test_usage_is_a_report_or_says_that_there_is_no_accounting(registered):
    now = datetime(2026, 11, 25, 12, 0)
    answers = {"sacct": sacct_json(sacct_run(7, "alice", "COMPLETED", datetime(2026, 11, 24, 9), datetime(2026, 11,
                                                                                                       24, 10)))}

    def accounting(argv) -> str:
        return answers[argv[0]]

    scheduler: Any = scheduler_answering(PortalConfig(), registered, accounting)
    try:
        report = scheduler.usage(scheduler.person("alice", ["gpu-users"]), False, now)
    except NoAccounting as err:  # a kind of the tree, answered 501 with the scheduler's words
        assert errors.answer(err)[0] == 501 and str(err)
        return
    assert isinstance(report, UsageReport)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def silent(name: str, tmp_path) -> PortalConfig:
    """Settings whose scheduler cannot be reached: Slurm's commands missing, an API server on a closed port."""
    if name == "slurm":
        return PortalConfig(slurm_bin_dir=tmp_path / "no-slurm-here")
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(f"""apiVersion: v1
kind: Config
clusters: [{{name: c, cluster: {{server: "https://127.0.0.1:{closed_port()}", insecure-skip-tls-verify: true}}}}]
users: [{{name: u, user: {{token: "x"}}}}]
contexts: [{{name: c, context: {{cluster: c, user: u}}}}]
current-context: c
""")
    return PortalConfig(scheduler="kubernetes", k8s_kubeconfig=str(kubeconfig))


@pytest.mark.parametrize("name", ["slurm", "kubernetes"])  # the local runner asks no service
def test_a_scheduler_that_does_not_answer_is_unavailable_in_its_own_name(name, tmp_path):
    scheduler = scheduler_for(silent(name, tmp_path), name)
    for ask in (scheduler.snapshot, lambda: scheduler.gpu_holders("n1")):
        with pytest.raises(errors.SchedulerUnavailable) as raised:
            ask()
        status, said, _ = errors.answer(raised.value)
        assert status == 503 and raised.value.scheduler.lower() == name, (status, said)
        assert said.lower().startswith(name) or f"the {name} api" in said.lower(), said


# --- limits: the spawn form and the submit form are views of each scheduler's answer ---------------------------

T4_NODE = {"metadata": {"name": "n1", "labels": {"nvidia": "t4"}}, "spec": {},
           "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "4"},
                      "conditions": [{"type": "Ready", "status": "True"}]}}
HER_SERVER = {"metadata": {"name": "jupyter-alice", "namespace": "dsportal-u-alice", "labels": {}},
              "status": {"phase": "Running"},
              "spec": {"nodeName": "n1", "containers": [{"resources": {"requests": {"nvidia.com/gpu": "1"}}}]}}


class RecordedCore:
    """A Kubernetes API of recorded objects: one t4 node with 4 GPUs, alice's server pod holding one of them."""

    def list_node(self, **kwargs: Any) -> dict:
        return {"items": [T4_NODE]}

    def list_pod_for_all_namespaces(self, **kwargs: Any) -> dict:
        return {"items": [HER_SERVER]}

    def list_namespaced_pod(self, namespace: str, **kwargs: Any) -> dict:
        return {"items": [HER_SERVER] if namespace == "dsportal-u-alice" else []}


def answering(name: str) -> Scheduler[Any]:
    """The scheduler called `name` with its cluster's answers recorded: Slurm's commands (a node of 4 GPUs, 2 of
    them held by a job of alice's), a Kubernetes API of recorded objects (RecordedCore), this machine."""
    if name == "slurm":
        return scheduler_answering(PortalConfig(), name, squeue_free)
    made = scheduler_for(PortalConfig(), name)
    if name == "kubernetes":
        made._apis = lambda user: (None, RecordedCore(), None)  # type: ignore[attr-defined]
    return made


def test_what_holds_gpus_on_a_node_is_named_as_the_snapshots_queue_names_it(registered):
    """A node's GPU reader asks (portal.gpus.agent): alice's job with 2 GPUs on Slurm's node, her server pod with
    one on Kubernetes' node; nothing on another node, nor on this machine."""
    scheduler = answering(registered)
    node = "n1" if registered == "kubernetes" else "localhost"
    holders = scheduler.gpu_holders(node)
    held = {"slurm": {"7": ("alice", 2)}, "kubernetes": {"jupyter-alice": ("alice", 1)}}.get(registered, {})
    assert {holder: (h.user, h.gpus) for holder, h in holders.items()} == held, registered
    assert set(holders) <= set(scheduler.snapshot().queue), registered  # the ids the watch and the pages name
    assert scheduler.gpu_holders("elsewhere") == {}, registered


class SchedulersSpawner(ServerOptionsMixin, LocalProcessSpawner):
    """A spawner of the portal's for whichever scheduler it names, as the Slurm and Kubernetes spawners are."""

    answered: Any = None

    def scheduler(self) -> Scheduler[Any]:
        return self.answered

    def apply_server_options(self, options) -> None:
        self.user_options = options.to_dict()


def test_the_submit_form_and_the_spawn_form_are_views_of_each_schedulers_limits(registered):
    scheduler = answering(registered)
    limits = scheduler.limits(scheduler.person("alice", ["gpu-users"]), scheduler.snapshot())
    assert limits.pools and limits.default_pool in limits.pools, registered
    held = {"slurm": 2, "kubernetes": 1}.get(registered, 0)  # what her job (Slurm) or server pod holds
    assert limits.quota.in_use == held, (registered, limits.quota)
    pool = limits.default_pool
    assert limits.server_gpus(pool) == min(pool.free_gpus_per_node, limits.quota.left), registered

    submit = {field.name: field for field in form_fields(limits)}
    assert submit["gpus_per_node"].hint.startswith(f"0-{limits.max_gpus_per_node} "), submit["gpus_per_node"]

    user = types.SimpleNamespace(name="alice", groups=[types.SimpleNamespace(name="gpu-users")], url="/user/alice/")
    spawner = SchedulersSpawner(user=user, portal=PortalConfig())
    spawner.answered = scheduler
    form = asyncio.run(spawner._render_options_form())
    for offered in limits.pools:
        assert f'<option value="{offered.name}"' in form, (registered, form[:400])
    assert f'max="{limits.server_gpus(pool)}"' in form or "<select id=\"ds-gpus\"" in form, form
    chosen = asyncio.run(spawner.options_from_form({"gpus": ["0"], "_xsrf": ["t"]}))
    assert chosen["partition"] == pool.name, (registered, chosen)
