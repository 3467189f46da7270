"""The check that the suites leave the users' own boxes as they found them (tests/users_boxes.py) catches each
kind of harm, and takes what the users' own boxes do meanwhile for what it is."""

from __future__ import annotations

import hashlib
import json
import stat

from tests.users_boxes import Marks, compare

FILE, DIR = stat.S_IFREG, stat.S_IFDIR
OLD_MAIL = b"From portal@dsportal.local Fri Nov 27\nSubject: Job 3 COMPLETED\n\nhttp://127.0.0.1:8000/services/portal/jobs/3\n"


def entry(inode: int, kind: int = FILE, size: int = 10, mtime: int = 1) -> dict:
    return {"type": kind, "inode": inode, "size": size, "mtime_ns": mtime}


def boxes(home: dict, jobs: dict | None = None, processes: dict | None = None, mail: bytes = OLD_MAIL) -> dict:
    return {"homes": {"alice": home}, "kube_homes": {"alice": {}},
            "mail": {"alice": {"size": len(mail), "sha256": hashlib.sha256(mail).hexdigest()}},
            "slurm": jobs or {}, "processes": processes or {}, "pods": {}}


HOME = {"notebooks": entry(1, DIR), "notebooks/mine.ipynb": entry(2), "jobs": entry(3, DIR),
        "jobs/dsportal": entry(4, DIR), "jobs/dsportal/11": entry(5, DIR), "jobs/dsportal/11/output.log": entry(6),
        "jobs/dsportal/12": entry(7, DIR), "jobs/dsportal/12/job.json": entry(8)}
SERVER = {"1000 555": {"user": "alice", "cmdline": "jupyterhub-singleuser", "job": "10", "node": "node1",
                       "test_box": False}}
JOB = {"1001 556": {"user": "alice", "cmdline": "python -m chexnet.train", "job": "11", "node": "node1",
                    "test_box": False}}


def check(before: dict, after: dict, now_mail: bytes = OLD_MAIL, culled: dict | None = None) -> list[str]:
    return compare(before, after, "dsportal_test", mailbox=lambda user: now_mail,
                   culled=lambda sizes: culled or {"slurm": set(), "kubernetes": set()})


def test_what_the_users_box_does_meanwhile_is_not_harm():
    before = boxes(HOME, {"10": "RUNNING", "11": "RUNNING", "12": "COMPLETED"}, {**SERVER, **JOB})
    grown = {**HOME, "jobs/dsportal/11/output.log": entry(6, size=99, mtime=2),
             "jobs/dsportal/11/checkpoints": entry(9, DIR), ".local/share/jupyter/runtime/jpserver-1.json": entry(10)}
    # TensorFlow writes its `checkpoint` index anew (a rename: another inode) at every save of the running job.
    before_home = {**HOME, "jobs/dsportal/11/checkpoints": entry(9, DIR),
                   "jobs/dsportal/11/checkpoints/checkpoint": entry(30)}
    saved_again = {**grown, "jobs/dsportal/11/checkpoints/checkpoint": entry(31, size=12, mtime=3)}
    assert check(boxes(before_home, {"11": "RUNNING"}, JOB), boxes(saved_again, {"11": "RUNNING"}, JOB)) == []
    after = boxes(grown, {"10": "RUNNING", "11": "COMPLETED", "12": "COMPLETED"}, SERVER)  # job 11 ended well
    mailed = OLD_MAIL + b"From portal@dsportal.local Fri Nov 27\nSubject: Job 11 COMPLETED\n\n" \
                        b"http://127.0.0.1:8000/services/portal/jobs/11\n"
    assert check(before, after, mailed) == []
    # The test box's own marks come and go: only one left behind is named.
    marked = {**HOME, "jobs/dsportal_test": entry(20, DIR)}
    assert check(boxes(HOME), boxes(HOME)) == []
    assert check(boxes(HOME), boxes(marked)) == ["~alice/jobs/dsportal_test: the test box's, left behind"]


def test_a_running_jobs_own_children_and_a_started_arrays_record_may_go():
    """Found in the newcomer's order (2026-12-04): the PyTorch job's data loader workers of a past epoch are gone
    while their parent trains on, and a pending sweep's array record ("5_[0-1%2]") is replaced by its tasks' once
    they start. Neither is harm; the same without the parent, or with a task cancelled, is."""
    loader = {"1002 557": {"user": "alice", "cmdline": "python -m chexnet_torch.train", "job": "11", "node": "node1",
                           "test_box": False, "parent": "1001"}}
    trainer = {key: {**value, "parent": "900"} for key, value in JOB.items()}
    before = boxes(HOME, {"11": "RUNNING", "5_[0-1%2]": "PENDING"}, {**trainer, **loader})
    assert check(before, boxes(HOME, {"11": "RUNNING", "5_0": "RUNNING", "5_[1%2]": "PENDING"}, trainer)) == []
    assert check(before, boxes(HOME, {"11": "RUNNING", "5_0": "COMPLETED", "5_1": "CANCELLED"}, {})) == [
        "Slurm job 5_[0-1%2] of the user's box: PENDING before, None after",
        "process 1001 of alice (python -m chexnet.train): gone; its Slurm job 11 is RUNNING",
        "process 1002 of alice (python -m chexnet_torch.train): gone; its Slurm job 11 is RUNNING"]
    assert check(before, boxes(HOME, {"11": "RUNNING"}, trainer)) == [
        "Slurm job 5_[0-1%2] of the user's box: PENDING before, None after"]


def test_a_server_its_own_hubs_idle_culler_stopped_is_the_users_box_doing_not_harm():
    """A run longer than the box's cull_idle_timeout: alice's idle server is culled by her own hub, its Slurm job
    CANCELLED and its processes gone. The same with no cull in her hub's log is the tests' harm; bob's cull does
    not excuse hers, nor a cull on the other box."""
    before = boxes(HOME, {"10": "RUNNING"}, SERVER)
    after = boxes(HOME, {"10": "CANCELLED"}, {})
    assert check(before, after, culled={"slurm": {"alice"}, "kubernetes": set()}) == []
    harm = ["Slurm job 10 of the user's box: RUNNING before, CANCELLED after",
            "process 1000 of alice (jupyterhub-singleuser): gone; its Slurm job 10 is CANCELLED"]
    assert check(before, after) == harm
    assert check(before, after, culled={"slurm": {"bob"}, "kubernetes": {"alice"}}) == harm
    pod = {"u1": {"namespace": "dsportal-u-alice", "name": "jupyter-alice", "phase": "Running", "job": ""}}
    assert check({**boxes(HOME), "pods": pod}, boxes(HOME), culled={"slurm": set(), "kubernetes": {"alice"}}) == []
    assert check({**boxes(HOME), "pods": pod}, boxes(HOME)) == ["pod dsportal-u-alice/jupyter-alice: gone"]


def test_the_cullers_and_gpu_watchs_stops_are_read_from_the_hubs_logs_after_the_snapshot(tmp_path, monkeypatch):
    from tests import users_boxes

    slurm_log, kube_log = tmp_path / "hub.log", tmp_path / "kube" / "node1" / "hub.log"
    kube_log.parent.mkdir(parents=True)
    slurm_log.write_bytes(b"[I IdleCuller] Culling server bob (inactive for 02:00:00)\n")
    kube_log.write_bytes(b"")
    monkeypatch.setattr(users_boxes, "HUB_LOGS", (str(slurm_log), str(tmp_path / "kube" / "*" / "hub.log")))
    monkeypatch.setattr(users_boxes, "KUBE_BOX", tmp_path / "kube")
    sizes = users_boxes.hub_logs()
    with slurm_log.open("ab") as log:
        log.write(b"[I 2026-12-02 09:18:16.467 IdleCuller __init__:255] Culling server alice (inactive for 01:29:38)\n")
        log.write(b"[I 2026-12-05 10:00:00.000 portal.service watch:190] gpu watch: stop server 12 of bob: its GPUs "
                  b"did nothing for 30 minutes\n")
        log.write(b"[I 2026-12-05 10:00:00.000 portal.service watch:190] gpu watch: stop job 13 of carol: ...\n")
    kube_log.write_bytes(b"2026-12-02T09:20:00Z stderr F [I IdleCuller] Culling server mallory (inactive for 1:00)\n")
    assert users_boxes.culled_since(sizes) == {"slurm": {"alice", "bob"}, "kubernetes": {"mallory"}}


def test_each_kind_of_harm_is_named():
    before = boxes(HOME, {"10": "RUNNING", "11": "RUNNING"}, {**SERVER, **JOB})
    removed = {k: v for k, v in HOME.items() if k != "notebooks/mine.ipynb"}
    assert check(before, boxes(removed, before["slurm"], before["processes"])) == \
        ["~alice/notebooks/mine.ipynb: removed"]
    changed = {**HOME, "notebooks/mine.ipynb": entry(2, size=11)}
    assert check(before, boxes(changed, before["slurm"], before["processes"])) == \
        ["~alice/notebooks/mine.ipynb: changed"]
    moved = {**HOME, "jobs/dsportal/12": entry(70, DIR)}  # moved aside and made again: another inode
    assert check(before, boxes(moved, before["slurm"], before["processes"])) == \
        ["~alice/jobs/dsportal/12: replaced (another inode or type)"]
    left = {**HOME, "stray.txt": entry(30)}
    assert check(before, boxes(left, before["slurm"], before["processes"])) == \
        ["~alice/stray.txt: new, not the user's own box's"]
    cancelled = check(before, boxes(HOME, {"10": "CANCELLED", "11": "RUNNING"}, JOB))
    assert cancelled == ["Slurm job 10 of the user's box: RUNNING before, CANCELLED after",
                         "process 1000 of alice (jupyterhub-singleuser): gone; its Slurm job 10 is CANCELLED"]
    assert check(before, boxes(HOME, before["slurm"], before["processes"]), b"") == \
        ["/var/mail/alice: what it held before was changed or removed"]
    stopped = check({**before, "daemons": {"slurmctld of the user's Slurm box": True}},
                    {**boxes(HOME, {}, before["processes"]), "daemons": {"slurmctld of the user's Slurm box": False}})
    assert stopped == ["slurmctld of the user's Slurm box: running before, not after",  # and so its jobs unknown
                       "Slurm job 10 of the user's box: RUNNING before, None after",
                       "Slurm job 11 of the user's box: RUNNING before, None after"]
    foreign = OLD_MAIL + b"From portal@dsportal.local Fri Nov 27\nSubject: Job 2 FAILED\n\nhttp://127.0.0.1:18000/x\n"
    (said,) = check(before, boxes(HOME, before["slurm"], before["processes"]), foreign)
    assert said.startswith("/var/mail/alice: a message that is not the user's box's: ")


def test_the_way_a_killed_session_made_to_its_marks_is_not_the_users():
    from tests.users_boxes import Marks, pruned

    found = {"jobs": entry(3, DIR), "jobs/dsportal_test": entry(4, DIR), "jobs/dsportal_test/1": entry(5, DIR),
             ".cache": entry(6, DIR), ".cache/dsportal": entry(7, DIR), ".cache/dsportal/servers": entry(8, DIR),
             ".cache/dsportal/servers/dsportal_test": entry(9, DIR), ".cache/pip": entry(10, DIR),
             "empty": entry(11, DIR)}
    assert sorted(pruned(found, Marks("dsportal_test"))) == [".cache", ".cache/pip", "empty"]


def test_an_empty_directory_a_killed_session_made_is_not_the_users(tmp_path):
    """A killed session made ~bob/jobs on the way to its marks, and its marks were removed by hand: the next session
    replays the killed one's ledger and removes the empty ~bob/jobs, so the snapshot before it leaves it out. An
    empty directory that no ledger names is the user's."""
    from tests.users_boxes import Marks, killed_sessions_made, pruned

    state = tmp_path / "dsportal-test"
    state.mkdir()
    (state / "homes-ledger.json").write_text(json.dumps({"bob": ["jobs"]}))
    (tmp_path / "dsportal-test-slurm-24.11.homes-ledger.json").write_text(json.dumps({"bob": [".config"], "x": 3}))
    (tmp_path / "dsportal-test-slurm-25.05.homes-ledger.json").write_text("{not json")
    made = killed_sessions_made(state)
    assert made == {"bob": frozenset({"jobs", ".config"})}
    found = {"jobs": entry(3, DIR), ".config": entry(4, DIR), ".config/app": entry(5, DIR), "empty": entry(6, DIR)}
    assert sorted(pruned(found, Marks("dsportal_test"), made["bob"])) == [".config", ".config/app", "empty"]
    assert killed_sessions_made(tmp_path / "none") == {}


def test_the_marks_are_the_test_boxes_own_on_every_release():
    """The Slurm test box's places and those of the boxes on other releases (tests/slurm_versions), nothing else."""
    marks = Marks("dsportal_test")
    for held in ("jobs/dsportal_test", "jobs/dsportal_test/12/output.log", "jobs/dsportal_test_slurm2411/3",
                 ".config/dsportal_test_slurm2605/settings.json", ".cache/dsportal/servers/dsportal_test_slurm2411",
                 ".cache/dsportal_test/keras"):
        assert marks.holds(held), held
    for users in ("jobs/dsportal/1", "jobs/dsportal_slurm2411/1", "jobs/dsportal_test2/1", "jobs/dsportal_testx",
                  "jobs/dsportal_test_slurm/1", ".cache/dsportal/servers/dsportal", "notebooks/dsportal_test"):
        assert not marks.holds(users), users
