"""GPU-seconds held and busy per holder, counted from each node's history as it grows: each reading once, a
trimmed history read again without counting twice, unknown held time apart, a line being written left for later,
old accounts forgotten, and the count carried across a restart."""

from __future__ import annotations

from datetime import datetime

from portal.gpus.agent import write
from portal.gpus.ledger import KEEP_S, LEDGER, Ledger
from portal.gpus.readings import GpuReading, NodeReading


def reading(folder, node: str, at: float, busy: dict[str, float | None], error: str = "") -> None:
    gpus = tuple(GpuReading(i, busy=b, holder=h, user="alice") for i, (h, b) in enumerate(busy.items()))
    folder.mkdir(mode=0o700, exist_ok=True)
    write(folder, NodeReading(node, at, 10.0, "standin", gpus, error))


def test_each_reading_counts_once_held_busy_and_unknown_apart(tmp_path):
    ledger = Ledger(tmp_path)
    for at in (10, 20, 30):
        reading(tmp_path, "n1", at, {"7": 50.0, "8": None})
        reading(tmp_path, "n2", at, {"7": 100.0})
    ledger.count(now=30)
    ledger.count(now=30)  # nothing new: nothing added
    seven, eight = ledger.accounts["7"], ledger.accounts["8"]
    assert (seven.held_s, seven.busy_s, seven.unknown_s) == (60.0, 45.0, 0.0)  # 2 GPUs x 3 readings x 10 s
    assert seven.efficiency == 0.75
    assert (eight.held_s, eight.busy_s, eight.unknown_s, eight.efficiency) == (30.0, 0.0, 30.0, None)
    reading(tmp_path, "n1", 40, {"7": 0.0}, error="NVML failed")  # an error reading: unknown
    Ledger(tmp_path).count(now=40)  # a restart carries on where it was
    again = Ledger(tmp_path)
    assert (again.accounts["7"].held_s, again.accounts["7"].unknown_s) == (70.0, 10.0)


def test_a_trimmed_history_is_not_counted_twice_and_a_half_written_line_waits(tmp_path):
    ledger = Ledger(tmp_path)
    for at in (10, 20):
        reading(tmp_path, "n1", at, {"7": 100.0})
    ledger.count(now=20)
    history = tmp_path / "n1.jsonl"
    lines = history.read_text().splitlines(keepends=True)
    trimmed = tmp_path / "trimmed"
    trimmed.write_text(lines[-1])
    trimmed.replace(history)  # the reader kept its newer part, in a new file
    reading(tmp_path, "n1", 30, {"7": 100.0})
    with history.open("a") as out:
        out.write('{"node": "n1", "at": 40')  # being written
    ledger.count(now=30)
    assert ledger.accounts["7"].held_s == 30.0
    with history.open("a") as out:
        out.write(', "interval_s": 10, "source": "standin", "gpus": []}\n')
    ledger.count(now=40)
    assert ledger.accounts["7"].held_s == 30.0 and ledger.read_to["n1"][2] == 40


def test_a_gap_is_not_counted_as_held_and_old_accounts_are_forgotten(tmp_path):
    ledger = Ledger(tmp_path)
    reading(tmp_path, "n1", 10, {"7": 100.0})
    reading(tmp_path, "n1", 15, {"7": 100.0})  # 5 s after the last: 5 s, not its 10 s interval
    ledger.count(now=15)
    assert ledger.accounts["7"].held_s == 15.0
    ledger.count(now=15 + KEEP_S)
    assert ledger.accounts == {}
    (tmp_path / LEDGER).write_text('{"accounts": {"7": {"user"')  # cut by a crash: counting starts again
    assert Ledger(tmp_path).accounts == {}


def test_each_users_gpu_hours_this_week_start_again_on_sunday_and_need_a_ledger(tmp_path):
    assert Ledger.week_held_by(tmp_path, 0.0) is None  # no GPU watch keeps a ledger here: unknown, not 0
    saturday = datetime(2026, 12, 5, 23, 59, 40).timestamp()  # two readings in a week's last 20 s, two in the next
    for at in (saturday, saturday + 10, saturday + 20, saturday + 30):
        reading(tmp_path, "n1", at, {"7": 100.0})
    ledger = Ledger(tmp_path)
    ledger.count(now=saturday + 30)
    # a reading counts in the week of its time: those at Sunday 00:00:00 and 00:00:10
    assert ledger.accounts["7"].held_s == 40.0 and ledger.accounts["7"].week_held_s == 20.0
    assert ledger.week_held(saturday + 30) == {"alice": 20 / 3600}
    assert ledger.week_held(saturday) == {}  # its last reading is next week's: nothing of this week kept
    assert Ledger.week_held_by(tmp_path, saturday + 30) == {"alice": 20 / 3600}


def test_each_users_totals_only_grow_outlive_forgotten_accounts_and_a_restart(tmp_path):
    reading(tmp_path, "n1", 10, {"7": 50.0, "8": None})
    reading(tmp_path, "n1", 20, {"7": 2.0})  # idle: known, under 5 %
    Ledger(tmp_path).count(now=20)
    reading(tmp_path, "n1", 20 + KEEP_S, {"9": 100.0})
    ledger = Ledger(tmp_path)  # a restart carries the totals on
    ledger.count(now=20 + KEEP_S)
    assert set(ledger.accounts) == {"9"}  # 7 and 8 forgotten...
    totals = ledger.totals["alice"]  # ...not what they held
    assert (totals.held_s, totals.busy_s, totals.idle_s, totals.unknown_s) == (40.0, 15.2, 10.0, 10.0)
