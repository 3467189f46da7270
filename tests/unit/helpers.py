"""What more than one unit test module uses, in one place: builders of specs and manifests, literal answers of
Slurm's tools, fakes of the dashboard's collaborators, and the checks they share.

A unit test module imports its helpers from here, from a conftest.py or from the suites' own modules at tests/
(answers.py, cards.py, slurm_answers.py, special_files.py), never from another test module (tests/unit/test_layers.py
keeps that). A helper one module alone uses stays in that module.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import re
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from unittest import mock

from jupyterhub.services.auth import HubOAuth

from chexnet.callbacks import TAG_THROUGHPUT
from portal.config import PortalConfig
from portal.directory import Group
from portal.jobs import Job, JobNotFound, JobSpecError, UnreadableRecord
from portal.metrics import TAG_AUROC_MEAN, TAG_LOSS_VAL
from portal.quota import GpuQuota
from portal.records.account import job_user
from portal.records.limits import JobLimits
from portal.records.record import JobRecord
from portal.records.spec import JobSpec, parse_job_spec
from portal.records.sweep import parse_sweep, sweep_view
from portal.scheduler.kubernetes.client import KubeUser
from portal.scheduler.kubernetes.manifests import ANNOTATION_SPEC
from portal.scheduler.kubernetes.records import limits_for
from portal.scheduler.registry import scheduler_class
from portal.scheduler.slurm.accounts import Accounting, read_slurm
from portal.scheduler.slurm.errors import SlurmError
from portal.scheduler.slurm.scheduler import SlurmScheduler
from portal.scheduler.snapshot import ClusterCache
from portal.service.hub_user import HubUser
from spawners.slurm import PortalSlurmSpawner
from tests.slurm_answers import squeue_job, squeue_json

# --- Job specs (portal.records.spec): the limits of a gpu-users member on a two-node cluster --------------------------

SPEC_DATA_DIR = "/data/chestxray14"
SPEC_LIMITS = JobLimits(partition="gpu", nodes=2, gpus_per_node=4, cpus_per_node=8, memory_gb_per_node=19,
                        max_minutes=7 * 1440, quota=GpuQuota(4, ("datascientists", "gpu-users")),
                        default_data_dir=SPEC_DATA_DIR)


def spec_readable(path: str) -> bool:
    return path in (SPEC_DATA_DIR, "/scratch/set")


def parse_spec(limits: JobLimits = SPEC_LIMITS, **raw) -> JobSpec:
    return parse_job_spec({"template": "chexnet", **raw}, limits, spec_readable)


# --- Batch scripts (portal.scheduler.slurm.sbatch, the Kubernetes launchers) ------------------------------------------

def sbatch_lines(script: str) -> dict[str, str]:
    return dict(re.findall(r"^#SBATCH --([\w-]+)=(\S+)$", script, re.M))


def bash_syntax_ok(script: str) -> None:
    result = subprocess.run(["bash", "-n"], input=script, text=True, capture_output=True)
    assert result.returncode == 0, result.stderr


def in_a_pod(script: str, timeout: float, **kwargs) -> subprocess.CompletedProcess[str]:
    """Run part of a Kubernetes script in bash as its pod runs it: in a PID namespace of its own, with its own /proc
    (unshare, as root; --kill-child: a timeout ends all of it). What the scripts find by name (`pkill -x torchrun`)
    or by scanning /proc is then this run's own processes. On the host it is every process of the machine: run
    there beside the boxes, a unit test's stop_torchrun killed a Kubernetes job's torchrun (CI at stop 74)."""
    return subprocess.run(["unshare", "--pid", "--fork", "--kill-child", "--mount-proc", "bash", "-c", script],
                          capture_output=True, text=True, timeout=timeout, **kwargs)


# --- Kubernetes (portal.scheduler.kubernetes): the Kubernetes versions docs/admin-guide.md claims, a job of alice's ---

K8S_CFG = PortalConfig(gpu_quota={"gpu-users": 8})
KUBERNETES_VERSIONS = ("1.25.0", "1.29.0", "1.33.0", "1.37.0")  # what docs/admin-guide.md claims: 1.25 and later
KUBE_ALICE = KubeUser(name="alice", groups=("gpu-users",), home=Path("/home/jovyan"), data_root=Path("/data"),
                      is_caller=False)
K8S_JOB_ID = "k8s-20261121-101500-a1b2c3"


def k8s_spec(**raw):
    limits = limits_for(K8S_CFG, KUBE_ALICE.groups)
    return parse_job_spec({"template": "chexnet", **raw}, limits, KUBE_ALICE.can_read_dir)


def pod_of_job(job: dict) -> dict:
    """A plain job's pod template as a Pod, for the schema check."""
    template = job["spec"]["template"]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "check", **template["metadata"]},
            "spec": template["spec"]}


def plain_job(conditions=(), deleting=False, nodes=2) -> dict:
    meta = {"name": K8S_JOB_ID, "annotations": {ANNOTATION_SPEC: json.dumps({"nodes": nodes})},
            **({"deletionTimestamp": "x"} if deleting else {})}
    return {"metadata": meta, "status": {"conditions": [{"type": t, "status": "True", "reason": r}
                                                        for t, r in conditions]}}


# --- Slurm accounts (portal.scheduler.slurm.accounts): literal `sacctmgr -nP` answers, the demo directory's groups ----

ACCOUNTS_CFG = PortalConfig()  # allowed: datascientists, portal-admins; gpu_quota: gpu-users=4; default_gpu_quota: 0
GROUP_BASE = ACCOUNTS_CFG.ldap_group_search_base
SCONTROL_CONFIG = """Configuration data as of 2026-11-22T10:00:00
AccountingStorageEnforce = associations,limits,qos,safe
AccountingStorageType   = accounting_storage/slurmdbd
ClusterName             = dsportal
CompleteWait            = 0 sec
"""
READ_ASSOC = ("sacctmgr", "-nP", "show", "assoc", "Cluster=dsportal",
              "format=Cluster,Account,User,GrpTRES,MaxSubmitJobs,GrpTRESMins")
READ_USERS = ("sacctmgr", "-nP", "show", "user", "Cluster=dsportal", "format=User,DefaultAccount")
READ_QOS = ("sacctmgr", "-nP", "show", "qos", "normal", "format=Name,Flags")
NEW_CLUSTER = "dsportal|root||\ndsportal|root|root|\n"
NEW_USERS = "root|root\n"
IN_SYNC = """dsportal|root|||
dsportal|root|root||
dsportal|datascientists|||
dsportal|datascientists|bob|gres/gpu=0|50
dsportal|gpu-users|||
dsportal|gpu-users|alice|gres/gpu=4|50
dsportal|portal-admins|||
dsportal|portal-admins|admin|gres/gpu=0|50
"""
IN_SYNC_USERS = "admin|portal-admins\nalice|gpu-users\nbob|datascientists\nroot|root\n"


def group(name: str, *members: str) -> Group:
    return Group(name, f"cn={name},{GROUP_BASE}", frozenset(members))


# The demo directory: mallory is in no group; admin only in portal-admins.
DEMO = (group("datascientists", "alice", "bob"), group("gpu-users", "alice"), group("portal-admins", "admin"))


def slurm_state(assoc: str, users: str, flags: str = "DenyOnLimit") -> Accounting:
    run = FakeSlurm(assoc, users, f"normal|{flags}\n")
    return read_slurm(ACCOUNTS_CFG, run)


class FakeSlurm:
    """Answers the four reads with literal sacctmgr output; records every command; refuses `refuse` if given."""

    def __init__(self, assoc: str = IN_SYNC, users: str = IN_SYNC_USERS, qos: str = "normal|DenyOnLimit\n",
                 refuse: str = ""):
        self.answers = {("scontrol", "show", "config"): SCONTROL_CONFIG, READ_ASSOC: assoc, READ_USERS: users,
                        READ_QOS: qos}
        self.refuse = refuse
        self.calls: list[tuple[str, ...]] = []

    def __call__(self, argv) -> str:
        self.calls.append(tuple(argv))
        if self.refuse and self.refuse in " ".join(argv):
            raise SlurmError(f"Slurm refused `{' '.join(argv)}`: Error with request: Job(s) active, cancel job(s) "
                             "before remove; C = dsportal A = datascientists U = bob")
        return self.answers.get(tuple(argv), "")

    @property
    def writes(self) -> list[tuple[str, ...]]:
        return [c for c in self.calls if c[:2] == ("sacctmgr", "-i")]


# --- The Slurm spawner (spawners.slurm_state): a spawner whose Slurm commands answer from a list ----------------------

def spawner_answering(spawner_class, answers: list[str | Exception]):
    # The batch variables set here need no hub user (batchspawner asks pwd and the environment otherwise).
    subvars = {"req_username": "alice", "req_homedir": "/nonexistent/alice", "req_keepvars": ""}
    extra = {"portal": PortalConfig()} if spawner_class is PortalSlurmSpawner else {}
    spawner = spawner_class(**subvars, **extra)
    spawner.job_id = "42"
    spawner.job_status = "RUNNING node1 None"  # as last seen

    async def run_command(cmd, input=None, env=None):
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    async def submitted():  # sbatch: the job is 42 already
        return spawner.job_id

    spawner.run_command, spawner.submit_batch_script, spawner.db = run_command, submitted, mock.Mock()
    return spawner


# --- The dashboard (portal.service) with portal.jobs, Slurm and the hub replaced by fakes -----------------------------

API_LIMITS = JobLimits(partition="gpu", nodes=1, gpus_per_node=4, cpus_per_node=8, memory_gb_per_node=19,
                       max_minutes=240, quota=GpuQuota(4), default_data_dir="/data")


class FakeScheduler(SlurmScheduler):
    """Slurm's jobs as the board sees them (queued in the shared snapshot), with states set by the test."""

    def __init__(self):
        super().__init__(PortalConfig())
        self.states: dict[str, str] = {}
        self.cancelled: list[str] = []
        self.asked: list[str] = []
        self.sweeps: dict[str, tuple[dict, dict]] = {}

    def state(self, record, user):
        self.asked.append(record.id)
        return self.states.get(record.id, "COMPLETED")

    def cancel(self, record, user):
        self.cancelled.append(record.id)
        self.states[record.id] = "CANCELLED"

    def history(self, record, user):
        return []

    def sweep(self, record, user):
        """Three tasks: one completed (the best), one pruned at epoch 2, one pending; or `sweeps[id]`, (trials,
        tasks) as programkit.sweep status and Slurm give them."""
        if record.id in self.sweeps:
            return sweep_view(record.sweep, *self.sweeps[record.id])
        trials = {0: {"number": 0, "state": "COMPLETE", "params": {"lr": 0.001}, "value": 0.91,
                      "epochs": {1: 0.6, 2: 0.85, 3: 0.91}},
                  1: {"number": 1, "state": "PRUNED", "params": {"lr": 1e-08}, "value": 0.4,
                      "epochs": {1: 0.38, 2: 0.4}}}
        return sweep_view(record.sweep, trials, {0: "COMPLETED", 1: "COMPLETED", 2: "PENDING"})


class FakeJobsAPI:
    """portal.jobs as the board calls it; every job belongs to an owner name, read as the caller."""

    def __init__(self, tmp: Path):
        self.tmp, self.fake_scheduler, self.owned = tmp, FakeScheduler(), {}
        self.slurm_down = False
        self.calls = 0
        self.checks: list[bool] = []  # get()'s `check` argument, call by call
        self.submits_held: threading.Event | None = None  # set: submits wait for it
        self.submitting = 0
        self.limits_given: list[JobLimits | None] = []  # submit()'s `limits`, call by call
        self.given: list[dict] = []  # submit()'s `spec`, call by call

    def add(self, owner: str, job_id: str, state: str = "COMPLETED", second: int | None = None,
            sweep: dict | None = None, spec: JobSpec | None = None) -> Job:
        job_dir = self.tmp / owner / job_id
        job_dir.mkdir(parents=True, exist_ok=True)
        (job_dir / "output.log").write_text("".join(f"line {i}\n" for i in range(100)))
        second = int(job_id) % 60 if second is None else second
        plan = parse_sweep(sweep, 3, None, 0) if sweep is not None else None
        record = JobRecord(id=job_id, scheduler="slurm", user=owner,
                           spec=spec or JobSpec(gpus_per_node=2, data_dir="/d"),
                           submitted_at=f"2026-01-01T00:00:{second:02d}+00:00", job_dir=job_dir, sweep=plan)
        self.fake_scheduler.states[job_id] = state
        job = Job(record, self.fake_scheduler, dataclasses.replace(job_user(), name=owner))  # read as the caller
        self.owned.setdefault(owner, []).append(job)
        return job

    def _check(self):
        self.calls += 1
        if self.slurm_down:
            raise SlurmError("Slurm refused `scontrol show job`: Unable to contact slurm controller")

    def jobs(self, user, groups, cfg):
        self._check()
        return list(self.owned.get(user, []))

    def job_entries(self, user, groups, cfg):
        self._check()
        return [(job.id, job.submitted_at) for job in self.owned.get(user, [])]

    def get(self, job_id, user, groups, cfg, check=True):
        self._check()
        self.checks.append(check)
        for job in self.owned.get(user, []):
            if job.id == job_id:
                return job
        raise JobNotFound(f"job {job_id}: not found among {user}'s jobs")

    def get_many(self, job_ids, user, groups, cfg):
        found = {}
        for job_id in job_ids:
            try:
                found[job_id] = self.get(job_id, user, groups, cfg, check=False)
            except (JobNotFound, UnreadableRecord) as err:
                found[job_id] = err
        return found

    def submit(self, spec, user, groups, cfg, limits=None):
        self._check()
        self.limits_given.append(limits)
        self.given.append(dict(spec))
        if self.submits_held is not None:
            self.submitting += 1
            self.submits_held.wait(10)
        quota = 4 if "gpu-users" in groups else 0
        if int(spec.get("gpus_per_node", 1 if quota else 0)) > quota:
            raise JobSpecError("gpus_per_node", f"{spec['gpus_per_node']} is out of range; allowed: 0-{quota}")
        if "epochs" in spec and not str(spec["epochs"]).isdigit():
            raise JobSpecError("epochs", f"{spec['epochs']!r} is not a whole number; allowed: 1-1000")
        return self.add(user, str(100 + sum(len(v) for v in self.owned.values())), "PENDING")

    def limits(self, user, groups, cfg):
        return API_LIMITS


class FakeDirectory:
    USERS = {"alice": HubUser("alice", ("datascientists", "gpu-users")), "bob": HubUser("bob", ("datascientists",)),
             "admin": HubUser("admin", ("portal-admins",), admin=True)}

    async def user(self, name, fresh=False):
        return self.USERS.get(name) or HubUser(name, ("datascientists",))

    async def everyone(self):
        return list(self.USERS.values())


def required_apart(pod_spec: dict) -> dict[str, str]:
    """The labels of the pods a Kubernetes pod must not share a node with (its required anti-affinity by hostname):
    each of a job's node pods on a node of its own, as `-N` on Slurm."""
    (term,) = pod_spec["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["topologyKey"] == "kubernetes.io/hostname", term
    return term["labelSelector"]["matchLabels"]


def scheduler_answering(cfg: PortalConfig, name: str, run):
    """The scheduler called `name`, its commands answered by a fake cluster's (`run`) where it runs commands
    (Slurm's takes `run`; the others none)."""
    made = scheduler_class(name)
    return made(cfg, run=run) if "run" in inspect.signature(made).parameters else made(cfg)  # type: ignore[call-arg]


def slurm_cache(cfg: PortalConfig, run, **given) -> ClusterCache:
    """The cluster cache over a Slurm scheduler answering with a fake Slurm's commands (`run`)."""
    return ClusterCache(cfg, SlurmScheduler(cfg, run=run), **given)


def squeue_free(argv):
    if argv[0] == "squeue":
        return squeue_json(squeue_job(7, "alice", gpus_per_node=2, started=int(time.time()) - 125))  # 2:05 ago
    if argv[2] == "partition":
        return "PartitionName=gpu Default=YES MaxTime=04:00:00 Nodes=localhost State=UP\n"
    return "NodeName=localhost CPUTot=8 RealMemory=20000 Gres=gpu:4 GresUsed=gpu:2 State=MIXED Partitions=gpu\n"


async def identify_from_test_header(handler):
    """Stands in for the hub's OAuth (PortalHandler.identify): the user the X-Test-User header names."""
    return handler.get_current_user()


class TestHeaderUser:
    """For a unit test's dashboard app (a mixin before AsyncHTTPTestCase): a temporary directory (`tmp_dir`), and
    handlers that take their user from the X-Test-User header (none without it), skip the XSRF check (a test of it puts
    back `real_xsrf_check`) and send a login to /hub/login; undone in tearDown."""

    def setUp(self):
        from portal.service.base import PortalHandler

        self.tmp_dir = tempfile.mkdtemp()
        self._saved = PortalHandler.get_current_user, PortalHandler.identify, PortalHandler.check_xsrf_cookie
        self.real_xsrf_check = PortalHandler.check_xsrf_cookie
        PortalHandler.get_current_user = lambda handler: (
            {"name": handler.request.headers["X-Test-User"]} if "X-Test-User" in handler.request.headers else None)
        PortalHandler.identify = identify_from_test_header
        PortalHandler.check_xsrf_cookie = lambda handler: None
        PortalHandler.get_login_url = lambda handler: "/hub/login"
        super().setUp()

    def tearDown(self):
        from portal.service.base import PortalHandler

        PortalHandler.get_current_user, PortalHandler.identify, PortalHandler.check_xsrf_cookie = self._saved
        del PortalHandler.get_login_url
        super().tearDown()


HUB_COOKIE = "service-portal"  # the dashboard's login cookie: the hub names it after the service's OAuth client
ALICES_TOKEN = "alices-oauth-token"


class FakeHubOAuth(HubOAuth):
    """HubOAuth as the service runs it (its signed cookie, its XSRF checks), except that the hub is not asked whose
    token a cookie or an Authorization header holds: `tokens` (token -> user name) answers."""

    tokens: dict[str, str]

    def user_for_token(self, token, use_cache=True, session_id="", *, sync=True):
        async def model():
            name = self.tokens.get(token)
            return {"kind": "user", "name": name, "scopes": ["access:services!service=portal"]} if name else None
        return self._call_coroutine(sync, model)


def hub_oauth(prefix: str = "/services/portal/", tokens: dict[str, str] | None = None) -> FakeHubOAuth:
    """The dashboard's HubOAuth (set it as PortalHandler._hub_auth), knowing `tokens` (alice's by default)."""
    auth = FakeHubOAuth(api_token="service-token", oauth_client_id=HUB_COOKIE, base_url=prefix, hub_prefix="/hub/",
                        api_url="http://127.0.0.1:1/hub/api", access_scopes={"access:services!service=portal"},
                        oauth_redirect_uri=f"{prefix}oauth_callback")
    auth.tokens = dict(tokens or {ALICES_TOKEN: "alice"})
    return auth


class CountingAPI(FakeJobsAPI):
    """FakeJobsAPI counting the listings asked for and the jobs loaded."""

    def __init__(self, tmp):
        super().__init__(tmp)
        self.entries_asked = 0
        self.loaded: list[str] = []

    def job_entries(self, user, groups, cfg):
        self.entries_asked += 1
        return super().job_entries(user, groups, cfg)

    def get(self, job_id, user, groups, cfg, check=True):
        self.loaded.append(job_id)
        return super().get(job_id, user, groups, cfg, check)


# --- TensorBoard's files ----------------------------------------------------------------------------------------------

def write_tf1_events(logdir, epochs: dict[int, tuple[float, float, float]]) -> None:
    """TF1-style scalars (simple_value) with chosen wall times: epoch -> (its end, images/sec, mean AUROC); one
    images/sec sample a second before each epoch's end."""
    from tensorboard.compat.proto import event_pb2, summary_pb2  # here: most users of this module need no TensorBoard
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    writer = EventFileWriter(str(logdir))
    for epoch, (end, rate, auroc) in epochs.items():
        for tag, value, wall in ((TAG_THROUGHPUT, rate, end - 1), (TAG_AUROC_MEAN, auroc, end),
                                 (TAG_LOSS_VAL, 0.3, end)):
            summary = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag, simple_value=value)])
            writer.add_event(event_pb2.Event(wall_time=wall, step=epoch * 100 if tag == TAG_THROUGHPUT else epoch,
                                             summary=summary))
    writer.close()
