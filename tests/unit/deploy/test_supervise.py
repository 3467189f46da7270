"""deploy/supervise.py with a real process: the service layer that both boxes (box.py, kubebox.py) start and stop
their daemons with."""

from __future__ import annotations

import dataclasses
import socket
from dataclasses import dataclass
from pathlib import Path

import pytest

from deploy import supervise
from deploy.supervise import BoxError, Lock, Place, Service, flags, service_pid, start_service, stop_service


@dataclass(frozen=True)
class TmpBox(Place):
    state: Path
    script = "testbox.py"

    @property
    def root(self) -> Path:
        return self.state


@pytest.fixture
def box(tmp_path: Path) -> TmpBox:
    for sub in ("run", "log"):
        (tmp_path / sub).mkdir()
    return TmpBox(tmp_path)


def sleeper(ready_file: str = "", timeout: float = 5, ports=lambda box: []) -> Service:
    """`sleep 30`, ready once `ready_file` exists under the state dir (at once without one)."""
    def ready(box: TmpBox) -> str | None:
        return None if not ready_file or (box.root / ready_file).exists() else f"no {ready_file} yet"
    return Service("sleeper", "sleep", lambda box: None, lambda box: ["sleep", "30"], ready, timeout, ports=ports)


def test_a_service_starts_once_is_found_by_its_pid_and_stops(box: TmpBox) -> None:
    svc = sleeper()
    (line,) = start_service(svc, box)
    assert line.startswith("sleeper: started (pid ")
    pid = service_pid(svc, box)
    assert pid and box.pid_file("sleeper").read_text() == f"{pid}\n"
    assert "testbox.py starts sleeper" in box.log_file("sleeper").read_text()
    assert start_service(svc, box) == [f"sleeper: already running (pid {pid})"]
    assert stop_service(svc, box) == f"sleeper: stopped (pid {pid})"
    assert service_pid(svc, box) is None and not box.pid_file("sleeper").exists()
    assert stop_service(svc, box) == "sleeper: not running"


def test_a_service_that_is_never_ready_is_stopped_and_named(box: TmpBox) -> None:
    svc = sleeper(ready_file="never", timeout=0.5)
    with pytest.raises(BoxError, match=r"sleeper not ready within 0 s \(no never yet\); read .*sleeper.log"):
        start_service(svc, box)
    assert not box.pid_file("sleeper").exists()


def test_a_taken_port_is_refused_before_anything_starts(box: TmpBox) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        undone = []  # what `prepare` did outside the box is undone (exim4's line in trusted_configs)
        svc = dataclasses.replace(sleeper(ports=lambda box: [("127.0.0.1", port)]), after_stop=undone.append)
        with pytest.raises(BoxError, match=f"sleeper: port 127.0.0.1:{port} is already in use"):
            start_service(svc, box)
    assert not box.pid_file("sleeper").exists() and undone == [box]


def test_one_script_at_a_time_per_state_dir(box: TmpBox) -> None:
    with Lock(box):
        with pytest.raises(BoxError, match=r"another testbox.py is working on this state dir \(.*testbox.lock\)"):
            with Lock(box):
                pass
    with Lock(box):  # released
        pass


def test_flags_and_run() -> None:
    assert flags(data_dir="/d", port=1) == ["--data-dir=/d", "--port=1"]
    assert supervise.run(["true"], "nothing").returncode == 0
    with pytest.raises(BoxError, match="probing: `false` exited 1"):
        supervise.run(["false"], "probing")
    with pytest.raises(BoxError, match="probing: no-such-program is not installed"):
        supervise.run(["no-such-program"], "probing")


def test_a_service_started_beside_the_next_is_launched_in_its_turn_and_waited_for_last(box: TmpBox) -> None:
    """The MLflow server's start: `up` does not wait for it before the hub starts, only at the end."""
    seen = []

    def second_ready(place: TmpBox) -> str | None:
        # When the second is ready, the first has been launched and is not ready yet (its file comes now).
        seen.append(service_pid(first, place))
        (place.root / "first-ready").touch()
        return None

    first = dataclasses.replace(sleeper(ready_file="first-ready"), name="first", beside=True)
    second = dataclasses.replace(sleeper(), name="second", ready=second_ready)
    lines = list(supervise.start_services([first, second], box))
    assert [line.split(":")[0] for line in lines] == ["second", "first"], lines
    assert seen and seen[0] is not None  # the first was running while the second became ready
    assert list(supervise.start_services([first, second], box)) == [
        f"second: already running (pid {service_pid(second, box)})",
        f"first: already running (pid {service_pid(first, box)})"]
    for svc in (first, second):
        stop_service(svc, box)
