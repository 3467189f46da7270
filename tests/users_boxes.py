"""What the users' own boxes hold, before `make test` and after it: the suites must leave it as they found it.

A newcomer's `make up` box (and `make up-k8s`'s) runs beside the tests' boxes, sharing the machine, the users'
homes and their mailboxes. `make test` takes a snapshot of it first (`python -m tests.users_boxes snapshot`) and
tests/users/test_users_boxes.py compares once every suite has run:

- files: every file and directory of a demo user's home that was there before (the test box's own marks
  excepted) is still there, the same inode; one that is not the output of a job of their own box that ran
  meanwhile is unchanged (size, mtime); nothing new is left outside those jobs and the places their own server
  writes (JupyterLab's runtime and workspace files, the kernels' history);
- the Kubernetes box's home volumes, the same way;
- mail: each user's mailbox holds what it held, and anything new is mail of their own box (its hub's links);
- Slurm: every job of the user's box that was queued or running is still so, or ended COMPLETED (or TIMEOUT, its
  own time limit), never cancelled, failed or lost by the tests; a user's server that their own box's hub stopped
  as idle (its idle culler's "Culling server <user>" in that hub's log, after the snapshot: a run longer than
  `cull_idle_timeout` meets it; or its GPU watch's "gpu watch: stop server <id> of <user>", past the box's
  default_gpu_idle_s and grace) is their box's doing, with its job and processes;
- processes: every process of a demo user's outside the test boxes is alive, or belonged to a job of their box
  that has ended as above;
- Kubernetes: every pod of the users' namespaces is there (the same UID), or belonged to a Job (whose controller
  replaces a pod it lost) and was not failing;
- the user's boxes' slurmctld and API server that ran before still run.

Nothing here runs as a user or follows a link in a home: lstat and reads of root's own view. Hashes are taken of
small files only (checkpoints are large; their size and mtime say enough).
"""

from __future__ import annotations

import hashlib
import json
import os
import pwd
import re
import stat
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEMO_USERS = ("alice", "bob", "mallory", "admin")
USER_BOX = Path("/var/lib/dsportal")  # `make up`'s state dir (portal.config's default)
KUBE_BOX = USER_BOX / "kube"  # `make up-k8s`'s
RELEASE_BOXES = Path(__file__).resolve().parent.parent / "deploy" / "slurm"  # `make up SLURM=<release>`'s settings


@dataclass(frozen=True)
class SlurmBox:
    """The users' Slurm box: `make up`'s on 22.05, or `make up SLURM=<release>`'s (one at a time: they share ports)."""

    state: Path
    cluster: str
    bin_dir: Path

    def command(self, name: str) -> str:
        return str(self.bin_dir / name)


def users_slurm_box() -> SlurmBox:
    """The users' Slurm box whose slurmctld runs (22.05's first), else 22.05's."""
    from portal.config import load

    boxes = [SlurmBox(USER_BOX, "dsportal", Path("/usr/bin"))]
    for settings in sorted(RELEASE_BOXES.glob("box-*.yaml")):
        cfg = load({"DSPORTAL_CONFIG": str(settings)})
        boxes.append(SlurmBox(cfg.state_dir, cfg.cluster_name, cfg.slurm_bin_dir))
    return next((box for box in boxes if pid_file_alive(box.state / "run" / "slurmctld.pid")), boxes[0])


SNAPSHOT = Path("/var/tmp/dsportal-users-before.json")
# The users' boxes' hubs' logs, where their idle cullers say whom they stopped: `make up`'s, and the kubelets' copies
# of the log of `make up-k8s`'s hub pod.
HUB_LOGS = (str(USER_BOX / "log" / "hub.log"), str(KUBE_BOX / "nodes" / "*" / "private" / "var" / "log" / "pods" /
                                                      "dsportal_hub-*" / "*" / "*.log"))
# Its idle culler's stop of a user's server, and its GPU watch's (portal.gpus.watch's log line: idle GPUs).
CULLED = re.compile(rb"(?:Culling server |gpu watch: stop server \S+ of )([a-z_][a-z0-9._-]*)(?: \(inactive|:)")
MAX_LOG_READ = 16 * 1024 * 1024
HASHED_BYTES = 256 * 1024  # files up to this size are compared by content too
# Where a user's own running JupyterLab and kernels write as they run: not the tests' doing when they change.
# (and .cache/dsportal/servers/<the box's cluster>: _may_change)
SERVER_WRITES = (".local/share/jupyter/runtime", ".jupyter/lab/workspaces", ".ipython/profile_default/history.sqlite")
ENDED_WELL = ("COMPLETED", "TIMEOUT")
TEST_NODE_PREFIX = os.environ.get("DSPORTAL_TEST_NODE_PREFIX", "tnode")  # the test box's nodes (tests/conftest.py)
TEST_CLUSTER = os.environ.get("DSPORTAL_TEST_CLUSTER", "dsportal_test")  # and its cluster's name
TEST_STATE = os.environ.get("DSPORTAL_TEST_STATE", "/var/tmp/dsportal-test")  # and its state dir
USER_HUB = "http://127.0.0.1:8000/services/portal/"  # the user's box's pages: its mail links there (jobs, GPUs)


@dataclass(frozen=True)
class Marks:
    """The test boxes' own places in a home: what their cleanup removes (tests/conftest.py's marks_in)."""

    cluster: str

    def holds(self, relative: str) -> bool:
        """Whether a path is the test boxes': the Slurm test box's (its cluster) or a box's on another Slurm release
        (<cluster>_slurm<release>, tests/slurm_versions)."""
        cluster = re.escape(self.cluster)
        return re.match(rf"(jobs|\.config|\.cache/dsportal/servers|\.cache)/{cluster}(_slurm[0-9]+)?(/|$)",
                        relative) is not None


def _file_entry(path: Path) -> dict[str, Any]:
    info = os.lstat(path)
    entry = {"type": stat.S_IFMT(info.st_mode), "inode": info.st_ino, "size": info.st_size,
             "mtime_ns": info.st_mtime_ns}
    if stat.S_ISREG(info.st_mode) and info.st_size <= HASHED_BYTES:
        try:
            with open(path, "rb", opener=lambda p, f: os.open(p, f | os.O_NOFOLLOW | os.O_NONBLOCK)) as stream:
                entry["sha256"] = hashlib.sha256(stream.read(HASHED_BYTES + 1)).hexdigest()
        except OSError:
            pass
    return entry


def tree(root: Path) -> dict[str, dict[str, Any]]:
    """Every entry under `root` (links not followed), by its path relative to `root`."""
    found: dict[str, dict[str, Any]] = {}
    if not root.is_dir():
        return found
    for top, dirs, files in os.walk(root):  # os.walk does not follow links to directories
        for name in dirs + files:
            path = Path(top) / name
            try:
                found[str(path.relative_to(root))] = _file_entry(path)
            except OSError:
                continue  # gone meanwhile
    return found


def pruned(found: dict[str, dict[str, Any]], marks: Marks,
           made: frozenset[str] = frozenset()) -> dict[str, dict[str, Any]]:
    """The tree less the test box's marks and the directories that hold nothing but marks (the way the box made to
    them, which its cleanup removes; a killed session's, which the next one removes after this snapshot). A directory
    a killed session's ledger says it made (`made`) goes too once nothing but marks is left in it, even empty: the
    next session removes it then."""
    keep = {relative for relative in found if not marks.holds(relative)}
    for folder in sorted((r for r in keep if stat.S_ISDIR(found[r]["type"])), key=lambda r: -r.count("/")):
        inside = [r for r in found if r.startswith(folder + "/")]
        if (inside or folder in made) and all(r not in keep for r in inside):
            keep.discard(folder)
    return {relative: found[relative] for relative in keep}


HOMES_LEDGER = "homes-ledger.json"  # in the Slurm test box's state dir while a session runs (tests/conftest.py)


def release_state(state: Path, release: str) -> Path:
    """The state dir of the box on another Slurm release (tests/slurm_versions), beside the test box's `state`."""
    return state.with_name(f"{state.name}-slurm-{release}")


def release_ledger(state: Path) -> Path:
    """Where a release box's session keeps its ledger: beside its state dir, which the session removes at start."""
    return state.with_name(f"{state.name}.{HOMES_LEDGER}")


def killed_sessions_made(state: Path | None = None) -> dict[str, frozenset[str]]:
    """Per user, the directories that killed test sessions made on the way to their marks: their ledgers
    (tests/conftest.py's homes_marked: the test box's, each release box's and the local jobs' box's), which the
    next session replays before its own."""
    state = state or Path(TEST_STATE)
    made: dict[str, set[str]] = {}
    releases = state.parent.glob(release_ledger(release_state(state, "*")).name)
    local = state.with_name(f"{state.name}-local") / HOMES_LEDGER  # tests/integration/test_local_jobs.py's
    for ledger in (state / HOMES_LEDGER, *releases, local):
        try:
            held = json.loads(ledger.read_text())
        except (OSError, ValueError):
            continue
        for user, paths in (held.items() if isinstance(held, dict) else ()):
            if isinstance(paths, list):
                made.setdefault(str(user), set()).update(p for p in paths if isinstance(p, str))
    return {user: frozenset(paths) for user, paths in made.items()}


def homes() -> dict[str, Path]:
    found = {}
    for user in DEMO_USERS:
        try:
            found[user] = Path(pwd.getpwnam(user).pw_dir)
        except KeyError:
            continue
    return found


def pid_file_alive(pid_file: Path) -> bool:
    """Whether the process a pid file names is alive (not gone, not a zombie)."""
    try:
        pid = int(pid_file.read_text().strip())
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, ValueError, IndexError):
        return False


def slurm_jobs(box: SlurmBox) -> dict[str, str]:
    """Every job of the user's Slurm box that it still knows (squeue) or accounts (sacct), id -> state. An array
    task is there under both its names: "31_2" and its own job id ("33"), which its processes' cgroups carry."""
    if not pid_file_alive(box.state / "run" / "slurmctld.pid"):
        return {}
    env = {**os.environ, "SLURM_CONF": str(box.state / "slurm" / "slurm.conf")}
    states = {}
    accounted = subprocess.run([box.command("sacct"), "-a", "-X", "-n", "-P", "-S", "now-7days", "-o",
                                "JobID,JobIDRaw,State"], env=env, capture_output=True, text=True, timeout=60).stdout
    queued = subprocess.run([box.command("squeue"), "-a", "-h", "-r", "-o", "%i|%A|%T"], env=env, capture_output=True,
                            text=True, timeout=60).stdout
    for line in (*accounted.splitlines(), *queued.splitlines()):  # squeue's word last: it is the newer
        job, raw, state = (line.split("|") + ["", ""])[:3]
        for name in {job, raw} - {""}:
            states[name] = state.split()[0] if state else ""
    return states


def user_processes() -> dict[str, dict[str, Any]]:
    """Every process of a demo user's, by "<pid> <start time>": its user, command line, parent's pid and Slurm job
    (from its cgroup, where Slurm put it)."""
    uids = {pwd.getpwnam(user).pw_uid: user for user in homes()}
    found = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            uid = proc.stat().st_uid
            if uid not in uids:
                continue
            fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
            parent, started = fields[1], fields[19]
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
            cgroups = (proc / "cgroup").read_text()
            environ = (proc / "environ").read_bytes()
        except OSError:
            continue
        # Slurm's cgroup: .../slurm_<node>/uid_<uid>/job_<id>/...: the node names the box (the tests' are tnode*).
        parts = [part for line in cgroups.splitlines() for part in line.split(":", 2)[-1].split("/")]
        job = next((part[4:] for part in parts if part.startswith("job_")), "")
        node = next((part[6:] for part in parts if part.startswith("slurm_")), "")
        found[f"{proc.name} {started}"] = {"user": uids[uid], "cmdline": cmdline[:200], "job": job, "node": node,
                                           "parent": parent,
                                           "test_box": node.startswith(TEST_NODE_PREFIX)
                                           or TEST_STATE.encode() in environ}
    return found


def kube_pods() -> dict[str, dict[str, Any]]:
    """Every pod in the users' namespaces of the user's Kubernetes box, by UID: its namespace, name, phase and
    the Job that owns it."""
    kubeconfig = KUBE_BOX / "kubeconfig" / "admin.kubeconfig"
    if not kubeconfig.exists() or not pid_file_alive(KUBE_BOX / "run" / "kube-apiserver.pid"):
        return {}
    from kubernetes import client, config

    api = client.CoreV1Api(config.new_client_from_config(str(kubeconfig)))
    found = {}
    for pod in api.list_pod_for_all_namespaces(timeout_seconds=30).items:
        if not pod.metadata.namespace.startswith("dsportal-u-"):
            continue
        owner = next((ref.name for ref in pod.metadata.owner_references or () if ref.kind == "Job"), "")
        found[pod.metadata.uid] = {"namespace": pod.metadata.namespace, "name": pod.metadata.name,
                                   "phase": pod.status.phase, "job": owner}
    return found


def mailboxes() -> dict[str, dict[str, Any]]:
    found = {}
    for user in homes():
        path = Path("/var/mail") / user
        if path.is_file():
            data = path.read_bytes()
            found[user] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    return found


def read_mailbox(user: str) -> bytes:
    path = Path("/var/mail") / user
    return path.read_bytes() if path.is_file() else b""


def daemons(box: SlurmBox) -> dict[str, bool]:
    """Whether the user's boxes' schedulers run: a box the tests stopped would otherwise only show in its jobs."""
    return {"slurmctld of the user's Slurm box": pid_file_alive(box.state / "run" / "slurmctld.pid"),
            "the API server of the user's Kubernetes box": pid_file_alive(KUBE_BOX / "run" / "kube-apiserver.pid")}


def snapshot(cluster: str = TEST_CLUSTER, marks_kept: bool = False) -> dict[str, Any]:
    """What the users' boxes hold now. Before the suites the test box's marks are left out (a killed session's,
    which the next one removes); after them (`marks_kept`) they are kept, so that one left behind is named."""
    made = killed_sessions_made()

    def home_tree(user: str, home: Path) -> dict[str, dict[str, Any]]:
        return tree(home) if marks_kept else pruned(tree(home), Marks(cluster), made.get(user, frozenset()))
    box = users_slurm_box()
    return {"slurm_box": {"state": str(box.state), "cluster": box.cluster},
            "homes": {user: home_tree(user, home) for user, home in homes().items()},
            "kube_homes": {user: tree(KUBE_BOX / "volumes" / "home" / user) for user in DEMO_USERS},
            "mail": mailboxes(), "slurm": slurm_jobs(box), "processes": user_processes(), "pods": kube_pods(),
            "daemons": daemons(box), "hub_logs": hub_logs()}


def hub_logs() -> dict[str, int]:
    """Each of the users' hubs' log files and its size now: where the check reads on from."""
    found = {}
    for pattern in HUB_LOGS:
        for path in Path("/").glob(pattern.lstrip("/")):
            try:
                found[str(path)] = path.stat().st_size
            except OSError:
                continue
    return found


def culled_since(sizes: dict[str, int]) -> dict[str, set[str]]:
    """The users whose servers the users' boxes' own idle cullers stopped since the logs had `sizes` (a log that
    is new since is read whole), by box: "slurm" (`make up`'s hub) and "kubernetes" (`make up-k8s`'s)."""
    culled: dict[str, set[str]] = {"slurm": set(), "kubernetes": set()}
    for path in hub_logs():
        try:
            with open(path, "rb") as log:
                log.seek(sizes.get(path, 0))
                names = {name.decode(errors="replace") for name in CULLED.findall(log.read(MAX_LOG_READ))}
        except OSError:
            continue
        culled["kubernetes" if path.startswith(str(KUBE_BOX) + "/") else "slurm"] |= names
    return culled


def job_dirs_that_ran(jobs_before: dict[str, str], jobs_after: dict[str, str]) -> set[str]:
    """The user's box's jobs that were queued or running at some point of the run: their directories may change."""
    ran = {job for job, state in jobs_before.items() if state not in ENDED_WELL}
    ran |= {job for job, state in jobs_after.items() if state not in ENDED_WELL or job not in jobs_before}
    return {job.split("_")[0] for job in ran}


def _may_change(relative: str, running: set[str], cluster: str = "dsportal") -> bool:
    """A path the user's own box (of that cluster) writes to while it runs: a job of theirs that ran (`running`)
    or their server."""
    parts = relative.split("/")
    if len(parts) >= 3 and parts[0] == "jobs" and parts[1] == cluster and parts[2].split(".")[0] in running:
        return True
    if len(parts) >= 2 and parts[0] == "jobs" and parts[1].split(".")[0] in running:  # the older layout
        return True
    writes = (*SERVER_WRITES, f".cache/dsportal/servers/{cluster}")
    return any(relative == p or relative.startswith(p + "/") for p in writes)


def compare_trees(before: dict[str, dict], after: dict[str, dict], marks: Marks, running: set[str],
                  where: str, cluster: str = "dsportal") -> list[str]:
    problems = []
    for relative, entry in before.items():
        if marks.holds(relative):
            continue
        now = after.get(relative)
        if now is None:
            if not _may_change(relative, running, cluster):
                problems.append(f"{where}/{relative}: removed")
            continue
        if now["inode"] != entry["inode"] or now["type"] != entry["type"]:
            # a running job replaces its own files (TensorFlow's `checkpoint`)
            if not _may_change(relative, running, cluster):
                problems.append(f"{where}/{relative}: replaced (another inode or type)")
        elif stat.S_ISREG(entry["type"]) and not _may_change(relative, running, cluster) and (
                now["size"], now["mtime_ns"], now.get("sha256")) != (entry["size"], entry["mtime_ns"],
                                                                     entry.get("sha256")):
            problems.append(f"{where}/{relative}: changed")
    for relative in sorted(set(after) - set(before)):
        if marks.holds(relative):
            problems.append(f"{where}/{relative}: the test box's, left behind")
        elif not _may_change(relative, running, cluster):
            problems.append(f"{where}/{relative}: new, not the user's own box's")
    return problems


UNENDED = ("PENDING", "RUNNING", "REQUEUED", "CONFIGURING", "COMPLETING")


def array_tasks_fine(job: str, jobs_after: dict[str, str]) -> bool:
    """A pending job array's record ("31_[0-3%2]") is gone once its tasks start: each task is then a record of its
    own ("31_0"), and the array is as it was when every such task is queued, running or ended well."""
    array = re.fullmatch(r"(\d+)_\[.*\]", job)
    tasks = [state for name, state in jobs_after.items()
             if array and re.fullmatch(rf"{array.group(1)}_(\d+|\[.*\])", name)]
    return bool(tasks) and all(state in (*UNENDED, *ENDED_WELL) for state in tasks)


def parent_lives(process: dict[str, Any], before: dict[str, Any], after: dict[str, Any]) -> bool:
    """Whether the process's parent, of the same Slurm job, runs still: the job's own program then ended it (a data
    loader's worker of an epoch that is over). What this lets pass, a child killed by someone else while its parent
    lives on, shows in its job's end, which the jobs' check reads."""
    return any(key.split()[0] == process.get("parent") and other["job"] == process["job"]
               and key in after["processes"] for key, other in before["processes"].items())


def compare(before: dict[str, Any], after: dict[str, Any], cluster: str,
            mailbox: Callable[[str], bytes] = read_mailbox,
            culled: Callable[[dict[str, int]], dict[str, set[str]]] = culled_since) -> list[str]:
    """What the suites changed of the users' boxes, as lines; [] when they left everything as they found it.
    `mailbox`: a user's mailbox as it reads now; `culled`: the users whose servers their own boxes' idle cullers
    stopped since the hubs' logs had the snapshot's sizes."""
    marks, problems = Marks(cluster), []
    idle = culled(before.get("hub_logs", {}))
    # The Slurm jobs of the servers the users' own hubs stopped as idle: their processes ended with them.
    culled_jobs = {process["job"] for process in before["processes"].values()
                   if process["job"] and process["user"] in idle["slurm"] and "singleuser" in process["cmdline"]}
    users_cluster = before.get("slurm_box", {}).get("cluster", "dsportal")
    for daemon, ran in before.get("daemons", {}).items():
        if ran and not after.get("daemons", {}).get(daemon):
            problems.append(f"{daemon}: running before, not after")
    jobs_before, jobs_after = before["slurm"], after["slurm"]
    for job, state in jobs_before.items():
        now = jobs_after.get(job)  # None: no longer known to the box's slurmctld and accounting
        if state in UNENDED and now not in (*UNENDED, *ENDED_WELL) and not (job in culled_jobs and now == "CANCELLED") \
                and not (now is None and state == "PENDING" and array_tasks_fine(job, jobs_after)):
            problems.append(f"Slurm job {job} of the user's box: {state} before, {now} after")
    running = job_dirs_that_ran(jobs_before, jobs_after)
    for user, tree_before in before["homes"].items():
        problems += compare_trees(tree_before, after["homes"].get(user, {}), marks, running, f"~{user}", users_cluster)
    for user, tree_before in before["kube_homes"].items():
        if tree_before:  # the tests' Kubernetes box has homes of its own: these are the user's box's alone
            kube_jobs = {name.split("/")[2] for name in after["kube_homes"].get(user, {}) if name.count("/") >= 2}
            problems += compare_trees(tree_before, after["kube_homes"].get(user, {}), marks, kube_jobs,
                                      f"{KUBE_BOX}/volumes/home/{user}")
    for user in set(before["mail"]) | set(after["mail"]):
        size = before["mail"][user]["size"] if user in before["mail"] else 0
        data = mailbox(user)
        kept, added = data[:size], data[size:]
        if user in before["mail"] and hashlib.sha256(kept).hexdigest() != before["mail"][user]["sha256"]:
            problems.append(f"/var/mail/{user}: what it held before was changed or removed")
        for message in (chunk for chunk in added.split(b"\nFrom ") if chunk.strip()):
            # The user's own box mails about its jobs, with its page: anything else came from the tests.
            if USER_HUB.encode() not in message:
                problems.append(f"/var/mail/{user}: a message that is not the user's box's: "
                                f"{message[:200].decode(errors='replace')!r}")
    for key, process in before["processes"].items():
        if process["test_box"] or key in after["processes"]:
            continue
        state = jobs_after.get(process["job"], "") if process["job"] else ""
        if not (process["job"] and (state in ENDED_WELL or process["job"] in culled_jobs
                                    or (state in UNENDED and parent_lives(process, before, after)))):
            problems.append(f"process {key.split()[0]} of {process['user']} ({process['cmdline'][:80]}): gone"
                            + (f"; its Slurm job {process['job']} is {state or 'unknown'}" if process["job"] else ""))
    for uid, pod in before["pods"].items():
        if uid not in after["pods"] and not (pod["job"] and pod["phase"] in ("Running", "Pending", "Succeeded")) \
                and pod["name"] not in {f"jupyter-{user}" for user in idle["kubernetes"]}:
            problems.append(f"pod {pod['namespace']}/{pod['name']}: gone")
    return problems


def main(argv: list[str]) -> int:
    if argv[1:2] != ["snapshot"]:
        print("usage: python -m tests.users_boxes snapshot", file=sys.stderr)
        return 2
    taken = snapshot()
    SNAPSHOT.write_text(json.dumps(taken))
    os.chmod(SNAPSHOT, 0o600)
    running = ", ".join(f"{daemon}: {'running' if ran else 'not running'}" for daemon, ran in taken["daemons"].items())
    print(f"users' boxes before the suites: {sum(len(t) for t in taken['homes'].values())} files in the homes, "
          f"{len(taken['slurm'])} Slurm jobs, {len(taken['processes'])} processes, {len(taken['pods'])} pods; "
          f"{running} (snapshot: {SNAPSHOT})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
