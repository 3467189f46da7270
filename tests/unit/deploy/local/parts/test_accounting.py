"""The box's accounting database (deploy.local.parts.accounting): its data directory made one box at a time."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from types import SimpleNamespace

from deploy.local.parts import accounting


def test_two_boxes_make_their_data_directories_one_at_a_time_and_each_once(tmp_path, monkeypatch):
    """Two boxes starting at once (the test box and a release's box in `make test`): their mariadb-install-db runs
    never overlap, and a box whose directory is made does not make it again."""
    monkeypatch.setattr(accounting, "INSTALL_LOCK", tmp_path / "install.lock")
    monkeypatch.setattr(accounting, "make_dir", lambda path, mode, owner=None: Path(path).mkdir(exist_ok=True))
    running, spans = [0], []

    def install(argv, what):
        running[0] += 1
        started, most = time.monotonic(), running[0]
        time.sleep(0.2)
        spans.append((started, time.monotonic(), most))
        running[0] -= 1
    monkeypatch.setattr(accounting, "run", install)
    boxes = [SimpleNamespace(accounting=tmp_path / name) for name in ("test-box", "release-box")]
    threads = [threading.Thread(target=accounting.ensure_database_files, args=(box,)) for box in boxes]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(spans) == 2 and all(most == 1 for *_, most in spans), spans
    assert all((box.accounting / ".initialized").exists() for box in boxes)
    accounting.ensure_database_files(boxes[0])
    assert len(spans) == 2  # made once
