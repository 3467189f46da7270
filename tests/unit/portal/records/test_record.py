"""Records in a user's home are untrusted input: every malformed job.json is an "unreadable record" for that one
job (with the reason), never someone else's job, never a 500; every list and page, the admin's too, still renders.
The real record parser, portal.jobs' loader and the board, over files in a temporary directory (each user's home)."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest
from tornado.testing import AsyncHTTPTestCase

from portal.config import PortalConfig
from portal.jobs import JobNotFound, UnreadableJob, UnreadableRecord, _load, listed_jobs, load_many
from portal.records.account import JobUser
from portal.records.record import JOB_ID, JobRecord, RecordError, RecordPlace, exit_code
from portal.records.spec import JobSpec
from portal.scheduler.slurm.errors import SlurmError
from portal.service.app import make_app
from portal.service.base import PortalHandler
from portal.service.board import JobBoard
from portal.service.hub_user import HubUser
from tests.answers import masked
from tests.cards import wrong_type_cards
from tests.unit.helpers import FakeDirectory, identify_from_test_header, slurm_cache, squeue_free

LOCAL_ID = "local-20261122T101010-abcdef"
OTHER_ID = "local-20261122T101011-fedcba"


class HomeUser(JobUser):
    """A user whose home is a temporary directory, read directly (as runuser would, as them)."""

    def read_text(self, path: Path, limit: int = 1 << 20) -> str | None:
        try:
            return path.read_bytes()[:limit + 1].decode(errors="replace")
        except OSError:
            return None

    def tail(self, path: Path, lines: int | None, max_bytes: int = 1 << 20) -> str | None:
        return self.read_text(path, max_bytes)

    def list_dirs_inodes(self, paths) -> dict[Path, list[tuple[str, str]]]:
        return {path: [(p.name, str(p.stat().st_ino)) for p in path.iterdir()] if path.is_dir() else []
                for path in paths}


def home_user(root: Path, name: str) -> HomeUser:
    return HomeUser(name=name, uid=os.geteuid(), gid=os.getegid(), home=root / name, groups=("datascientists",))


CLUSTER = PortalConfig().cluster_name  # "dsportal": jobs in ~/jobs/dsportal/<id>
OLD_LAYOUT = ""  # ~/jobs/<id>: before each cluster had a directory of its own


def job_dir_of(root: Path, user: str, job_id: str, cluster: str = CLUSTER) -> Path:
    return root / user / "jobs" / cluster / job_id if cluster else root / user / "jobs" / job_id


def good_record(root: Path, user: str = "alice", job_id: str = LOCAL_ID, cluster: str = CLUSTER) -> dict:
    return {"id": job_id, "scheduler": "local", "user": user, "spec": JobSpec(data_dir="/data").to_dict(),
            "submitted_at": "2026-11-22T10:10:10+00:00", "job_dir": str(job_dir_of(root, user, job_id, cluster))}


def write_job(root: Path, user: str, job_id: str, content: str | dict, exit_status: str = "0",
              cluster: str = CLUSTER) -> Path:
    job_dir = job_dir_of(root, user, job_id, cluster)
    job_dir.mkdir(parents=True, exist_ok=True)
    (job_dir / "job.json").write_text(content if isinstance(content, str) else json.dumps(content))
    (job_dir / "exit_status").write_text(exit_status)
    return job_dir


class HomeJobsAPI:
    """portal.jobs as the board calls it, over the homes under `root`: the real loader and record checks."""

    def __init__(self, root: Path):
        self.root = root

    def job_entries(self, user, groups, cfg):
        return listed_jobs(home_user(self.root, user), cfg)

    def get(self, job_id, user, groups, cfg, check=True):
        return _load(home_user(self.root, user), str(job_id), cfg, check=False)

    def get_many(self, job_ids, user, groups, cfg):
        return load_many(home_user(self.root, user), job_ids, cfg)

    def usage(self, **kwargs):
        raise SlurmError("no accounting here")


# --- the parser: each malformed shape is a RecordError that says what is wrong ---

def test_a_good_record_reads_back(tmp_path):
    place = RecordPlace(LOCAL_ID, "alice", job_dir_of(tmp_path, "alice", LOCAL_ID))
    record = JobRecord.from_json(json.dumps(good_record(tmp_path)), expect=place)
    assert (record.id, record.user, record.spec.data_dir) == (LOCAL_ID, "alice", "/data")


def without(record: dict, name: str) -> dict:
    return {key: value for key, value in record.items() if key != name}


def test_a_record_written_before_the_rename_reads_back_and_a_new_one_carries_both_names(tmp_path):
    """Records that say `backend` (every job before the rename) are read for good; a new record also writes it, the
    same value, so a portal of an earlier release reads it until the old name goes (portal.renamed)."""
    place = RecordPlace(LOCAL_ID, "alice", job_dir_of(tmp_path, "alice", LOCAL_ID))
    old = {**without(good_record(tmp_path), "scheduler"), "backend": "local"}
    record = JobRecord.from_json(json.dumps(old), expect=place)
    assert record.scheduler == "local"
    written = json.loads(record.to_json())
    assert written["scheduler"] == written["backend"] == "local"
    assert JobRecord.from_json(record.to_json(), expect=place) == record


def malformed(root: Path) -> list[tuple[str, str, str]]:
    """(what, job.json text, words the reason must hold)."""
    good = good_record(root)
    shapes = [
        ("not JSON", "{not json", "not JSON"),
        ("empty", "", "not JSON"),
        ("a JSON array", "[1, 2]", "list, not an object"),
        ("a JSON string", '"alice"', "str, not an object"),
        ("NaN", json.dumps(good).replace('"nodes": 1', '"nodes": NaN'), "NaN is not a number"),
        ("deep nesting", "[" * 100_000 + "]" * 100_000, "bytes, more than"),
        ("huge", json.dumps({**good, "pad": "x" * 100_000}), "bytes, more than"),
        ("user names another user", json.dumps({**good, "user": "bob"}), "user: says 'bob'"),
        ("id of another directory", json.dumps({**good, "id": OTHER_ID}), f"in the directory of job {LOCAL_ID}"),
        ("job_dir elsewhere", json.dumps({**good, "job_dir": "/home/bob/jobs/x"}), "job_dir: says"),
        ("a non-canonical id", json.dumps({**good, "id": "0002"}), "is not a job id"),
        ("a kubernetes scheduler", json.dumps({**good, "scheduler": "kubernetes"}), "scheduler:"),
        ("an old record's kubernetes", json.dumps({**without(good, "scheduler"), "backend": "kubernetes"}),
         "scheduler: 'kubernetes'"),
        ("the old name differs", json.dumps({**good, "backend": "slurm"}), "backend (its old name) says 'slurm'"),
        ("the old name a number", json.dumps({**good, "backend": 7}), "backend: a int"),
    ]
    for name in ("id", "scheduler", "user", "spec", "submitted_at", "job_dir"):
        shapes.append((f"missing {name}", json.dumps({k: v for k, v in good.items() if k != name}), "missing"))
    wrong_types = {"id": 2, "user": ["bob"], "spec": [], "submitted_at": 5, "job_dir": None}
    for name, value in wrong_types.items():
        shapes.append((f"{name} of a wrong type", json.dumps({**good, name: value}), name))
    for field, value in (("nodes", "2"), ("nodes", True), ("nodes", 1e300), ("nodes", -1), ("nodes", 10**30),
                         ("fp16", 1), ("data_dir", 5), ("data_dir", "x" * 5000), ("model", "a\nb")):
        shapes.append((f"spec.{field}={str(value)[:10]}", json.dumps({**good, "spec": {**good["spec"], field: value}}),
                       f"spec.{field}" if field not in ("data_dir", "model") or not isinstance(value, str) else field))
    shapes.append(("submitted_at not a time", json.dumps({**good, "submitted_at": "yesterday"}), "ISO 8601"))
    shapes.append(("a control character", json.dumps({**good, "user": "alice\n"}), "control characters"))
    return shapes


ROOT = Path("/nonexistent/homes")


@pytest.mark.parametrize(("what", "text", "words"), malformed(ROOT), ids=[m[0] for m in malformed(ROOT)])
def test_each_malformed_shape_is_a_record_error_saying_why(what, text, words):
    place = RecordPlace(LOCAL_ID, "alice", job_dir_of(ROOT, "alice", LOCAL_ID))
    with pytest.raises(RecordError) as caught:
        JobRecord.from_json(text, expect=place)
    assert words in str(caught.value), (what, str(caught.value))
    assert len(str(caught.value)) < 300, what  # a short reason, never the record echoed whole


def a_sweeps_record() -> dict:
    from portal.records.sweep import parse_sweep

    plan = parse_sweep({"trials": 4, "space": {"lr": {"low": 1e-4, "high": 1e-2}, "batch_size": [8, 16]}}, 5, None, 0)
    return {**good_record(ROOT), "sweep": plan.to_dict()}


def test_every_field_of_another_type_is_a_record_error_naming_it():
    """Each field of a sweep's job.json given each JSON type but its own (tests/cards.py): a RecordError that
    names the field, never another error. A sweep's choices are named as the submit form spells them
    (sweep.space.batch_size[0]); its `epochs` is not read (the spec's count), nor are choices given as a list."""
    place = RecordPlace(LOCAL_ID, "alice", job_dir_of(ROOT, "alice", LOCAL_ID))
    read = 0
    for path, kind, record in wrong_type_cards(a_sweeps_record()):
        named = path.replace(".choices", "")
        if named == "sweep.epochs" or path == "sweep.space.batch_size" and kind == "a list":
            JobRecord.from_json(json.dumps(record), expect=place)
            continue
        with pytest.raises(RecordError) as caught:
            JobRecord.from_json(json.dumps(record), expect=place)
        message, read = str(caught.value), read + 1
        unknown = kind == "an object" and "unknown field; allowed fields: low, high" in message  # a range's keys
        assert message.startswith(named.split("[")[0]) or unknown, (path, kind, message)
    assert read > 150


def test_ids_have_one_spelling():
    for good in ("1", "2", "42", "999999999999", LOCAL_ID):
        assert JOB_ID.match(good), good
    for bad in ("0", "0002", "02", "", "1234567890123", "٢", "２", "2\n", " 2", "+2", "local-2026-x", "../bob"):
        assert not JOB_ID.match(bad), bad


def test_exit_codes_are_small_ascii_numbers():
    assert [exit_code(t) for t in ("0\n", "1", "-9", "137")] == [0, 1, -9, 137]
    assert [exit_code(t) for t in (None, "", "٠", "9" * 5000, "1e3", "0x1", "1 2")] == [None] * 7


# --- the loader: a directory of the user's with a broken record is "unreadable", with its owner and reason ---

def test_the_loader_names_the_directorys_owner_never_the_records_user(tmp_path):
    write_job(tmp_path, "alice", LOCAL_ID, good_record(tmp_path, user="bob"))
    with pytest.raises(UnreadableRecord) as caught:
        _load(home_user(tmp_path, "alice"), LOCAL_ID, PortalConfig(), check=False)
    job = caught.value.job
    assert isinstance(job, UnreadableJob) and (job.id, job.owner) == (LOCAL_ID, "alice")
    assert "says 'bob'" in job.reason and "alice's home" in job.reason
    for act in (job.cancel, job.logs, job.metrics):
        with pytest.raises(UnreadableRecord):
            act()


def test_a_missing_record_is_not_found_and_a_good_one_loads(tmp_path):
    write_job(tmp_path, "alice", LOCAL_ID, good_record(tmp_path))
    job = _load(home_user(tmp_path, "alice"), LOCAL_ID, PortalConfig(), check=False)
    assert (job.owner, job.state) == ("alice", "COMPLETED")
    with pytest.raises(JobNotFound):
        _load(home_user(tmp_path, "alice"), OTHER_ID, PortalConfig(), check=False)


# --- where records are: this cluster's directory, then the older layout's; never another cluster's ---

def test_this_clusters_jobs_and_the_older_layouts_are_listed_and_another_clusters_are_not(tmp_path):
    """alice's ~/jobs holds this cluster's jobs 5 and LOCAL_ID, the older layout's 5 and 6, and another cluster's
    7. The cluster's own 5 is the job 5 (the older one of that id stays where it is, unlisted); 6 is read from
    the older layout; 7 is another cluster's business."""
    write_job(tmp_path, "alice", "5", {**good_record(tmp_path, job_id="5"), "submitted_at": "2026-11-23T10:00:00"})
    write_job(tmp_path, "alice", LOCAL_ID, good_record(tmp_path))
    old_five = write_job(tmp_path, "alice", "5", good_record(tmp_path, job_id="5", cluster=OLD_LAYOUT),
                         cluster=OLD_LAYOUT)
    write_job(tmp_path, "alice", "6", good_record(tmp_path, job_id="6", cluster=OLD_LAYOUT), cluster=OLD_LAYOUT)
    write_job(tmp_path, "alice", "7", good_record(tmp_path, job_id="7", cluster="other"), cluster="other")
    alice, cfg = home_user(tmp_path, "alice"), PortalConfig()
    listed = dict(listed_jobs(alice, cfg))
    assert sorted(listed) == sorted(["5", LOCAL_ID, "6"])
    assert listed["5"] == str(job_dir_of(tmp_path, "alice", "5").stat().st_ino) != str(old_five.stat().st_ino)
    assert _load(alice, "5", cfg, check=False).record.submitted_at == "2026-11-23T10:00:00"
    six = _load(alice, "6", cfg, check=False)
    assert six.job_dir == str(job_dir_of(tmp_path, "alice", "6", OLD_LAYOUT)) and six.record.run_prefix == "6"
    assert _load(alice, LOCAL_ID, cfg, check=False).record.run_prefix == f"{CLUSTER}/{LOCAL_ID}"
    with pytest.raises(JobNotFound):
        _load(alice, "7", cfg, check=False)
    assert old_five.is_dir()  # nothing moved aside or removed


def test_without_the_older_layout_only_this_clusters_directory_counts(tmp_path):
    write_job(tmp_path, "alice", "6", good_record(tmp_path, job_id="6", cluster=OLD_LAYOUT), cluster=OLD_LAYOUT)
    write_job(tmp_path, "alice", "8", good_record(tmp_path, job_id="8"))
    alice, cfg = home_user(tmp_path, "alice"), PortalConfig(jobs_old_layout=False)
    assert [name for name, _ in listed_jobs(alice, cfg)] == ["8"]
    with pytest.raises(JobNotFound):
        _load(alice, "6", cfg, check=False)


def test_a_job_being_made_in_this_clusters_directory_is_never_read_from_the_older_layout(tmp_path):
    """Mid-submit, ~/jobs/<cluster>/9 exists before its job.json: not found yet, not the older layout's job 9."""
    write_job(tmp_path, "alice", "9", good_record(tmp_path, job_id="9", cluster=OLD_LAYOUT), cluster=OLD_LAYOUT)
    job_dir_of(tmp_path, "alice", "9").mkdir(parents=True)
    with pytest.raises(JobNotFound):
        _load(home_user(tmp_path, "alice"), "9", PortalConfig(), check=False)


# --- the board and the pages: one broken record breaks nothing else ---

def make_board(root: Path) -> JobBoard:
    return JobBoard(PortalConfig(), slurm_cache(PortalConfig(), squeue_free), api=HomeJobsAPI(root))


def test_the_list_shows_a_broken_record_as_one_unreadable_row_and_the_rest_as_usual(tmp_path):
    write_job(tmp_path, "alice", LOCAL_ID, "[1, 2]")
    write_job(tmp_path, "alice", OTHER_ID, good_record(tmp_path, job_id=OTHER_ID))
    write_job(tmp_path, "bob", "5", good_record(tmp_path, user="bob", job_id="5"))
    board = make_board(tmp_path)
    rows = {row["id"]: row for row in board.job_rows(HubUser("alice"))}
    assert rows[LOCAL_ID]["state"] == "UNREADABLE" and "list, not an object" in rows[LOCAL_ID]["unreadable"]
    assert rows[OTHER_ID]["state"] == "COMPLETED"
    admin = HubUser("admin", admin=True)
    everyone = [HubUser("alice"), HubUser("bob"), admin]
    listed = sorted((row["user"], row["id"], row["state"]) for row in board.job_rows(admin, everyone))
    assert listed == [("alice", LOCAL_ID, "UNREADABLE"), ("alice", OTHER_ID, "COMPLETED"),
                      ("bob", "5", "COMPLETED")]


def test_a_record_claiming_another_user_never_lists_under_them(tmp_path):
    write_job(tmp_path, "alice", LOCAL_ID, good_record(tmp_path, user="bob"))
    board = make_board(tmp_path)
    assert board.job_rows(HubUser("bob")) == []
    [row] = board.job_rows(HubUser("alice"))
    assert (row["user"], row["state"]) == ("alice", "UNREADABLE")


def test_the_rescan_carries_on_and_a_fixed_record_is_read_again(tmp_path):
    now = [0.0]
    board = JobBoard(PortalConfig(), slurm_cache(PortalConfig(), squeue_free, clock=lambda: now[0]),
                     api=HomeJobsAPI(tmp_path), rescan_s=10,
                     refresher=fakes_refresher(), clock=lambda: now[0])
    job_dir = write_job(tmp_path, "alice", LOCAL_ID, "{broken")
    assert [r["state"] for r in board.job_rows(HubUser("alice"))] == ["UNREADABLE"]
    (job_dir / "job.json").write_text(json.dumps(good_record(tmp_path)))  # the same directory (inode), fixed
    write_job(tmp_path, "alice", OTHER_ID, "null")
    now[0] = 11
    board.job_rows(HubUser("alice"))  # due: rescanned
    rows = {r["id"]: r["state"] for r in board.job_rows(HubUser("alice"))}
    assert rows == {LOCAL_ID: "COMPLETED", OTHER_ID: "UNREADABLE"}


def test_a_first_list_reads_its_records_and_its_states_files_in_a_process_each_whatever_its_length(tmp_path,
                                                                                                    monkeypatch):
    """The board's first list of a user's jobs: every job.json in one process as him (portal.jobs.load_many), then
    the files each job's state reads in one more (Board.prime_states): 2 processes for 12 ended jobs, where each
    read was a process of its own (36 and more). The rows are what each job's own files say."""
    ids = [f"local-20261122T1010{second:02d}-abcdef" for second in range(12)]
    for number, job_id in enumerate(ids):
        write_job(tmp_path, "alice", job_id, good_record(tmp_path, job_id=job_id), exit_status=str(number % 2))
    runs: list[str] = []
    real_run = JobUser.run
    monkeypatch.setattr(JobUser, "run", lambda self, argv, **kw: runs.append(argv[0]) or real_run(self, argv, **kw))
    board = JobBoard(PortalConfig(), slurm_cache(PortalConfig(), squeue_free), api=HomeJobsAPI(tmp_path),
                     refresher=fakes_refresher())
    rows = {row["id"]: row["state"] for row in board.job_rows(HubUser("alice"))}
    assert rows == {job_id: "FAILED" if number % 2 else "COMPLETED" for number, job_id in enumerate(ids)}
    assert runs == ["/bin/bash", "/bin/bash"], runs


def fakes_refresher():
    from portal.service.board import Refresher
    return Refresher(execute=lambda task: task())


class UnreadableRecordPages(AsyncHTTPTestCase):
    """The pages and API over the real loader: alice has a broken record, bob a good job. Requests name their user
    in X-Test-User, as in portal/service/test_api.py (the hub's OAuth is tested in integration)."""

    def get_app(self):
        self.root = Path(tempfile.mkdtemp())
        write_job(self.root, "alice", LOCAL_ID, good_record(self.root, user="bob"))
        write_job(self.root, "bob", OTHER_ID, good_record(self.root, user="bob", job_id=OTHER_ID))
        cfg = PortalConfig()
        cluster = slurm_cache(cfg, squeue_free)
        return make_app(cfg, prefix="/services/portal/", hub_base_url="/", cluster=cluster,
                        board=make_board(self.root), directory=FakeDirectory(), notebooks_dir=self.root)

    def setUp(self):
        self._saved = PortalHandler.get_current_user, PortalHandler.check_xsrf_cookie, PortalHandler.identify
        PortalHandler.identify = identify_from_test_header
        PortalHandler.get_current_user = lambda handler: (
            {"name": handler.request.headers["X-Test-User"]} if "X-Test-User" in handler.request.headers else None)
        PortalHandler.check_xsrf_cookie = lambda handler: None
        super().setUp()

    def tearDown(self):
        PortalHandler.get_current_user, PortalHandler.check_xsrf_cookie, PortalHandler.identify = self._saved
        super().tearDown()

    def call(self, method, path, user="alice", body=None):
        return self.fetch(f"/services/portal/{path}", method=method, headers={"X-Test-User": user},
                          follow_redirects=False, body=body, allow_nonstandard_methods=True)

    def test_every_page_renders_and_nothing_is_done_with_the_broken_record(self):
        listing = self.call("GET", "jobs")
        assert listing.code == 200 and b"unreadable record" in listing.body and LOCAL_ID.encode() in listing.body
        page = self.call("GET", f"jobs/{LOCAL_ID}")
        assert page.code == 200 and b"unreadable record: user: says" in page.body, page.body[-2000:]
        api = self.call("GET", f"api/jobs/{LOCAL_ID}")
        assert api.code == 200 and json.loads(api.body)["state"] == "UNREADABLE"
        for method, path in (("DELETE", f"api/jobs/{LOCAL_ID}"), ("POST", f"jobs/{LOCAL_ID}/cancel"),
                             ("GET", f"jobs/{LOCAL_ID}/log")):
            response = self.call(method, path, body="" if method == "POST" else None)
            assert response.code == 409 and b"unreadable record" in response.body, (method, path, response.body)
        everyone = self.call("GET", "jobs", user="admin")
        assert everyone.code == 200 and LOCAL_ID.encode() in everyone.body and OTHER_ID.encode() in everyone.body
        assert self.call("GET", f"jobs/{LOCAL_ID}", user="admin").code == 200
        assert self.call("GET", f"api/jobs/{LOCAL_ID}", user="bob").code == 404  # never bob's

    def test_another_users_job_answers_exactly_as_a_job_that_does_not_exist(self):
        missing = "local-20261122T235959-000000"
        for method, path in (("GET", "api/jobs/{}"), ("DELETE", "api/jobs/{}"), ("GET", "jobs/{}"),
                             ("GET", "jobs/{}/log"), ("POST", "jobs/{}/cancel")):
            body = "" if method == "POST" else None
            bobs, nobodys = (self.call(method, path.format(job_id), body=body) for job_id in (OTHER_ID, missing))
            assert bobs.code == nobodys.code == 404, (method, path, bobs.code, nobodys.code)
            assert masked(bobs.body.replace(OTHER_ID.encode(), b"ID")) == \
                masked(nobodys.body.replace(missing.encode(), b"ID"))
            assert b"not found among alice" in bobs.body, bobs.body[-500:]

    def test_job_ids_have_one_spelling_in_the_routes(self):
        for job_id in ("0002", "02", "%D9%A2", "%EF%BC%92", "1234567890123", "local-2026-x"):
            for path in (f"api/jobs/{job_id}", f"jobs/{job_id}", f"jobs/{job_id}/log"):
                assert self.call("GET", path).code == 404, path
