"""Every read of a file in the product's code is accounted for (issue 40, item 1): a user's file is read only
through the bounded readers (the dashboard's `JobUser.read_text`/`tail`, as the user with a time cap; the training
side's `programkit.userfiles`, which a dashboard-run `programkit.sweep_cli status` uses), and every other read says
here why its file is not one a user can put in place (the portal's own settings, files the portal wrote as root, the
data set a job reads as its own user). A new `open`, `read_text`, `read_bytes` or `os.open` in portal/, spawners/,
programkit/ or a program's package fails this test until it is one of those, with its reason.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import REPO

PACKAGES = ("portal", "spawners", "programkit", "chexnet", "chexnet_torch")
BOUNDED = "the bounded reader (JobUser.read_text: as the user, regular file, size and time caps)"
OWN_DATA = "the data set or checkpoint of the job's own run, read as its user: a hostile file there stalls only them"
# (module, function, call) -> why that read is not a bypass.
ACCOUNTED = {
    ("portal/gpus/files.py", "append_lines", "open"): "appends to a history of the readers or of the dashboard's "
    "watch, in root's 0700 readings directory: reads nothing",
    ("portal/gpus/files.py", "append_lines", "read_bytes"): "the history it writes itself, to keep its newer half, "
    "in root's 0700 readings directory: no user's file",
    ("portal/gpus/ledger.py", "_count_node", "open"): "a node's reading history, written by root's reader in "
    "root's 0700 readings directory (no user writes there); at most MAX_READ of it a pass",
    ("portal/gpus/ledger.py", "_load", "read_text"): "the ledger the dashboard writes itself, in root's 0700 readings "
    "directory",
    ("portal/gpus/watch.py", "_load", "read_text"): "the watch's state that the dashboard writes itself, in root's "
    "0700 readings directory",
    ("portal/gpus/watch.py", "_read_events", "read_bytes"): "the watch's events, the dashboard's own (kept under "
    "MAX_EVENTS_BYTES), in root's 0700 readings directory",
    ("portal/gpus/cgroups.py", "_numbers", "read_text"): "a cgroup's cgroup.procs: the kernel's (cgroupfs has no "
                                                         "links or FIFOs, even in a cgroup a job made)",
    ("portal/gpus/cgroups.py", "_process", "read_text"): "/proc/<pid>/stat and statm: the kernel's",
    ("programkit/userfiles.py", "read_bytes", "os.open"): "the training side's bounded reader itself",
    ("programkit/studylock.py", "acquire", "os.open"): "creates the lock file (O_CREAT | O_EXCL): never reads one",
    ("programkit/cpus.py", "_read", "open"): "the kernel's cgroup files (cpu.max, cpu.cfs_quota_us), 64 bytes at most: "
                                          "no user's file",
    ("portal/jobmail.py", "first_message", "os.open"): "creates an array's marker (O_CREAT | O_EXCL) in root's slurm "
                                                       "directory: never reads one",
    ("programkit/tblog.py", "_fsync_directory", "os.open"): "opens the run's directory to fsync it; reads nothing",
    ("programkit/model_card.py", "installed_commit", "read_text"): "the venv's own source.json, written by root's "
                                                                "install-package.sh: no user's file",
    ("portal/directory.py", "search_password", "read_text"): "the portal's directory password, a root-owned 0600 "
                                                             "file of the settings: no user's file",
    ("portal/ldap_login.py", "user_bind", "open"): "ldap3's Connection.open: a connection to the directory, no file",
    ("programkit/tblog.py", "append_record", "open"): "appends the run's own epoch record (the writer)",
    ("programkit/sweepclaims.py", "claim", "open"): "the claims' lock file, opened to append and lock (flock)",
    ("programkit/data/synthetic.py", "_write_csv", "open"): "writes the generated demo set's CSV",
    ("programkit/data/chestxray14.py", "_read_csv", "open"): OWN_DATA,
    ("programkit/data/chestxray14.py", "_read_list", "read_text"): OWN_DATA,
    ("chexnet/data/tfrecords.py", "_encode_file", "read_bytes"): OWN_DATA,
    ("chexnet/data/tfrecords.py", "encode_image", "open"): OWN_DATA,
    ("programkit/model_card.py", "sha256_file", "open"): OWN_DATA + " (hashed in chunks for its card)",
    ("chexnet_torch/data.py", "_read", "open"): OWN_DATA,
    ("chexnet_torch/data.py", "index_shard", "open"): OWN_DATA,
    ("chexnet_torch/data.py", "labels", "open"): OWN_DATA,
    ("chexnet_torch/loop.py", "save", "open"): "writes the run's own checkpoint (a new file, renamed into place)",
    ("portal/config_values.py", "read_yaml", "read_text"): "the site's portal.yaml (DSPORTAL_CONFIG), root's",
    ("portal/prometheus_access.py", "secret_line", "os.open"): "the Prometheus token and reader (metrics_token_file, "
    "prometheus_reader_file), root's and 0600, regular files (refused otherwise), opened without blocking; one line "
    "of at most 4,096 bytes",
    ("portal/mlflow_accounts.py", "admin_credentials", "read_text"): "the MLflow server's admin (mlflow_admin_file), "
                                                                      "a root-owned 0600 file",
    ("portal/mlflow_accounts.py", "__enter__", "open"): "the lock beside the portal's record of MLflow accounts, in "
                                                        "root's state dir: locked, never read",
    ("portal/mlflow_accounts.py", "__enter__", "os.open"): "creates the portal's record of MLflow accounts (0600) in "
                                                           "root's state dir: SQLite reads it",
    ("portal/jobs/demo_data.py", "_without_fingerprints", "read_text"): "the demo set's manifest, made by root",
    ("portal/templates.py", "install_templates", "open"): "the portal's own notebook templates, in its package",
    ("portal/templates.py", "install_templates", "read_text"): "the portal's own notebook templates, in its package",
    ("portal/jobs/__init__.py", "_load", "read_text"): BOUNDED,
    ("portal/scheduler/home.py", "model_card", "read_text"): BOUNDED,
    ("portal/scheduler/local.py", "_pid", "read_text"): BOUNDED,
    ("portal/scheduler/local.py", "state", "read_text"): BOUNDED,
    ("portal/scheduler/slurm/scheduler.py", "_left_behind", "read_text"): BOUNDED,
    ("portal/scheduler/slurm/scheduler.py", "_remember", "read_text"): BOUNDED,
}
MODULES_WITH_OPEN = ("os", "io", "gzip", "bz2", "lzma", "tarfile", "zipfile", "codecs")


def reads_in(path: Path, root: Path = REPO) -> list[tuple[str, str, str]]:
    """(module, as a path under `root`; enclosing function; call) for each read-like call in a module."""
    tree = ast.parse(path.read_text())
    enclosing: dict[int, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            for inner in ast.walk(node):
                enclosing[id(inner)] = node.name  # the innermost wins: ast.walk reaches outer functions first
    found = []
    module = path.relative_to(root).as_posix()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        call = node.func
        name = None
        if isinstance(call, ast.Name) and call.id == "open":
            name = "open"
        elif isinstance(call, ast.Attribute) and call.attr in ("open", "read_text", "read_bytes"):
            if isinstance(call.value, ast.Name) and call.value.id in MODULES_WITH_OPEN:
                name = f"{call.value.id}.{call.attr}"
            elif not (isinstance(call.value, ast.Name) and call.value.id in ("subprocess", "webbrowser")):
                name = call.attr
        if name:
            found.append((module, enclosing.get(id(node), "<module>"), name))
    return found


def test_every_read_of_a_file_is_bounded_or_says_why_it_need_not_be():
    found = {read for package in PACKAGES for path in sorted((REPO / package).rglob("*.py")) for read in reads_in(path)}
    unaccounted = sorted(found - set(ACCOUNTED))
    assert not unaccounted, (
        "reads that go around the bounded readers (programkit.userfiles, JobUser.read_text) or are not accounted "
        "for in ACCOUNTED with a reason:\n" + "\n".join(":".join(read) for read in unaccounted))
    assert not set(ACCOUNTED) - found, f"accounted for but gone (remove them): {sorted(set(ACCOUNTED) - found)}"


def test_the_walk_finds_a_read_that_goes_around(tmp_path):
    module = tmp_path / "portal" / "probe.py"
    module.parent.mkdir()
    module.write_text("import os\ndef peek(path):\n    with open(path) as f:\n        return f.read()\n"
                      "def also(path):\n    return path.read_bytes(), os.open(path, os.O_RDONLY)\n"
                      "def fine(cmd):\n    return subprocess.run(cmd)\n")
    assert sorted(reads_in(module, tmp_path)) == [("portal/probe.py", "also", "os.open"),
                                                  ("portal/probe.py", "also", "read_bytes"),
                                                  ("portal/probe.py", "peek", "open")]
