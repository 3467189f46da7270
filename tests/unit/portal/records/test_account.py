"""Commands run for a user, and reads of a user's files, within bounds (issue 25): the whole process group goes on
timeout, output is capped, and a file that is no regular file (a FIFO, a link to a device) gives nothing at once."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from portal.records import account
from portal.records.account import every_scheduler_calls, job_user, run_bounded, scheduler_calls
from tests.special_files import device_link, directory, fifo, huge_sparse_file


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def ends(pid: int, within_s: float = 10.0) -> bool:
    """Whether the process is gone within `within_s` (a SIGKILL takes a moment to land)."""
    deadline = time.monotonic() + within_s
    while alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def test_a_timeout_kills_what_the_command_started_too(tmp_path):
    pids = tmp_path / "pids"
    script = f'sleep 600 & echo $! > {pids}; cat /dev/zero > /dev/null'  # a child, and a reader that never ends
    with pytest.raises(subprocess.TimeoutExpired):
        run_bounded(["/bin/sh", "-c", script], None, timeout=1.0)
    child = int(pids.read_text())
    assert ends(child)  # subprocess.run(timeout=...) left it running


def test_what_a_finished_command_left_in_its_group_is_ended():
    result = run_bounded(["/bin/sh", "-c", "sleep 600 >/dev/null 2>&1 & echo $!"], None, timeout=30)
    assert result.returncode == 0 and ends(int(result.stdout))


def test_output_is_capped_and_the_command_stopped():
    started = time.monotonic()
    result = run_bounded(["cat", "/dev/zero"], None, timeout=60, max_output=1024 * 1024)
    assert result.returncode != 0 and len(result.stdout) == 1024 * 1024
    assert b"stopped after 1048576 bytes of output" in result.stderr
    assert time.monotonic() - started < 30  # not the 60 s timeout: stopped at the cap


def test_input_and_output_larger_than_a_pipe_flow_both_ways():
    data = os.urandom(3 * 1024 * 1024)
    result = run_bounded(["cat"], data, timeout=60)
    assert result.returncode == 0 and result.stdout == data


def test_a_command_that_is_not_there_is_an_oserror_as_with_subprocess_run():
    with pytest.raises(FileNotFoundError):
        run_bounded(["/nonexistent/command"], None, timeout=5)


@pytest.fixture
def me():
    return job_user()  # the caller (root in CI): commands run plainly, through the same bounded runner


def test_a_fifo_a_device_link_and_a_directory_read_as_nothing_at_once(tmp_path, me):
    fifo(tmp_path / "fifo")
    device_link(tmp_path / "zero")
    device_link(tmp_path / "urandom", "/dev/urandom")
    directory(tmp_path / "dir")
    started = time.monotonic()
    for name in ("fifo", "zero", "urandom", "dir", "missing"):
        assert me.read_text(tmp_path / name) is None, name
        assert me.tail(tmp_path / name, 10) is None, name
        assert me.tail(tmp_path / name, None) is None, name
    assert time.monotonic() - started < 10  # each returned at once: none waited for its timeout (10 s apiece)


def test_a_huge_file_is_read_only_as_far_as_asked(tmp_path, me):
    big = tmp_path / "big.log"
    huge_sparse_file(big, 2 * 1024**3)  # 2 GB of zeros
    with big.open("ab") as out:
        out.write(b"\nline one\nline two\nline three\n")
    assert len(me.read_text(big, limit=100)) == 101  # limit + 1: the caller knows it is too large
    assert me.tail(big, 2) == "line two\nline three\n"
    assert len(me.tail(big, None, max_bytes=4096)) == 4096
    one_line = tmp_path / "one-line.log"
    one_line.write_bytes(b"x" * (1024 * 1024) + b"\nlast\n")
    assert me.tail(one_line, 1, max_bytes=100) == "last\n"
    assert len(me.tail(one_line, 2, max_bytes=100)) == 100  # the part of a long line within the bytes asked


def test_plain_files_read_as_before(tmp_path, me):
    (tmp_path / "job.json").write_text('{"id": "7"}')
    (tmp_path / "log").write_text("a\nb\nc\n")
    assert me.read_text(tmp_path / "job.json") == '{"id": "7"}'
    assert me.tail(tmp_path / "log", 2) == "b\nc\n" and me.tail(tmp_path / "log", None) == "a\nb\nc\n"
    (tmp_path / "empty").write_text("")
    assert me.read_text(tmp_path / "empty") == "" and me.tail(tmp_path / "empty", 5) == ""


def test_many_files_read_in_one_process_answer_as_each_read_alone(tmp_path, me, monkeypatch):
    """read_texts: every kind of file gives what read_text_why gives it, in one process per READ_MANY_AT_ONCE
    paths; a process whose answer is not READ_MANY's gives way to reading each path alone."""
    fifo(tmp_path / "fifo")
    device_link(tmp_path / "zero")
    directory(tmp_path / "dir")
    huge_sparse_file(tmp_path / "huge", 1024**3)
    (tmp_path / "plain").write_bytes(b"line \xff one\nline two\n\n")
    (tmp_path / "empty").write_text("")
    (tmp_path / "link").symlink_to(tmp_path / "plain")
    names = ["fifo", "zero", "dir", "huge", "plain", "empty", "link", "missing", "no-dir/file"]
    paths = [tmp_path / name for name in names] * 15  # 135: two processes
    alone = {path: me.read_text_why(path, 100) for path in paths}
    assert alone[tmp_path / "plain"] == ("line \ufffd one\nline two\n\n", "")
    assert len(alone[tmp_path / "huge"][0]) == 101 and alone[tmp_path / "link"][0] is None
    assert alone[tmp_path / "fifo"] == (None, "a fifo, not a regular file")
    assert alone[tmp_path / "missing"] == alone[tmp_path / "no-dir/file"] == (None, "")
    runs = []
    real_run = account.JobUser.run
    monkeypatch.setattr(account.JobUser, "run",
                        lambda self, argv, **kw: runs.append(argv[0]) or real_run(self, argv, **kw))
    assert me.read_texts(paths, 100) == alone
    assert runs == ["/bin/bash", "/bin/bash"]
    monkeypatch.setattr(account, "READ_MANY", 'echo " 0 " "$@"')  # an answer of the wrong shape
    runs.clear()
    assert me.read_texts(paths[:9], 100) == {path: alone[path] for path in paths[:9]}
    assert runs == ["/bin/bash", *["/bin/sh"] * 9]


def test_event_files_that_are_no_regular_files_are_not_read(tmp_path):
    from portal.metrics import read_run_metrics

    fifo_run, device_run = tmp_path / "fifo", tmp_path / "device"
    fifo_run.mkdir()
    device_run.mkdir()
    fifo(fifo_run / "events.out.tfevents.1.node1")  # reading it waited for ever, with 408 MB held
    device_link(device_run / "events.out.tfevents.1.node1")
    for run in (fifo_run, device_run):
        metrics = read_run_metrics(run)
        assert metrics.unreadable == "events.out.tfevents.1.node1 is not a regular file: not read", metrics


def test_a_command_runs_while_the_process_holds_more_than_a_thousand_descriptors():
    """A dashboard with a connection per user holds thousands of descriptors; select() refuses any numbered 1024
    or more (bench.dashboard at 5,000 users answered 500s), so the wait for a command's exit must not use it."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 1200
    if soft < wanted + 64:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, wanted + 64), hard))  # raise it: CI's limit is 1024
    held = []
    try:
        while len(held) < wanted:
            held.append(os.open("/dev/null", os.O_RDONLY))
        assert max(held) >= 1024
        result = run_bounded(["/bin/sh", "-c", "echo ran"], None, timeout=30)
        assert result.returncode == 0 and result.stdout == b"ran\n"
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_each_scheduler_has_one_counter_of_its_commands_by_its_name(monkeypatch):
    """What GET api/cluster shows admins as user_<name>_calls: a scheduler's module asks for its counter once."""
    monkeypatch.setattr(account, "_SCHEDULER_CALLS", {})
    counted = scheduler_calls("toy")
    assert scheduler_calls("toy") is counted and every_scheduler_calls() == {"toy": {}}
    counted.add("sbatch")
    counted.add("scancel")
    counted.add("sbatch")
    assert every_scheduler_calls() == {"toy": {"sbatch": 2, "scancel": 1}}
