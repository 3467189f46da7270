"""GPU-seconds held and busy, per job and server, counted from the nodes' readings as they are written: the Usage
page's held and busy GPU-hours (efficiency) per job, per server and for the week.

Each pass of the dashboard's GPU watch (portal.service.gpu_watch) reads what each node's history (<node>.jsonl)
gained since the last pass, and adds each reading's interval to the holders of its GPUs: held for every GPU held,
busy in proportion to its busy figure, unknown where the reader could not tell (never counted as idle or as busy). A
history that was trimmed since (the reader keeps its newer half in a new file) is read again from its start, past
what was counted. The accounts live in <readings_dir>/ledger.json (root's, like the readings) and are kept for
KEEP_S after their last reading. Each also counts what it held in the week of its last reading (Sunday 00:00 local
time, the Usage page's week): what is left of a user's weekly GPU-hours budget where the scheduler keeps no
accounting of its own (Kubernetes; portal.jobs.budget). Each user's totals since the ledger began are never
forgotten: the operators' counters (portal.service.prometheus).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable
from dataclasses import asdict, dataclass, fields
from datetime import datetime
from pathlib import Path

from portal.gpus.files import replace_text
from portal.gpus.readings import HOLDER, NodeReading, ReadingError
from portal.scheduler.usage import week_start

LEDGER = "ledger.json"
TOTALS = ("held_s", "busy_s", "idle_s", "unknown_s")
KEEP_S = 8 * 24 * 3600.0  # a week's page, and a day to spare
MAX_READ = 8 << 20  # at most this much of a history per pass (the reader keeps half of 4 MB)
log = logging.getLogger("portal.gpus")


@dataclass
class Account:
    """One holder's GPU-seconds: held, busy (the busy share of held), unknown (held, read as unknown)."""

    holder: str
    user: str
    held_s: float = 0.0
    busy_s: float = 0.0
    unknown_s: float = 0.0
    first_at: float = 0.0
    last_at: float = 0.0
    week: float = 0.0  # the start of the week of its last reading (epoch seconds)
    week_held_s: float = 0.0  # held in that week

    @property
    def efficiency(self) -> float | None:
        """Busy over held, of what was known; None when nothing known was held."""
        known = self.held_s - self.unknown_s
        return self.busy_s / known if known > 0 else None


@dataclass
class Totals:
    """A user's GPU-seconds since the ledger began: held, busy, held while idle (known and under IDLE_BELOW), and
    held while unknown. They only grow (Prometheus counters)."""

    held_s: float = 0.0
    busy_s: float = 0.0
    idle_s: float = 0.0
    unknown_s: float = 0.0


class Ledger:
    def __init__(self, folder: Path):
        self.folder = folder
        self.accounts: dict[str, Account] = {}
        self.totals: dict[str, Totals] = {}
        # node -> its history file's inode, the bytes of it read, and the last reading's time
        self.read_to: dict[str, tuple[int, int, float]] = {}
        self._load()

    def _load(self) -> None:
        try:
            data = json.loads((self.folder / LEDGER).read_text())
            names = {f.name for f in fields(Account)}
            self.accounts = {key: Account(**{k: v for k, v in value.items() if k in names})
                             for key, value in data["accounts"].items() if HOLDER.fullmatch(key)}
            self.read_to = {node: (int(at[0]), int(at[1]), float(at[2])) for node, at in data["read_to"].items()}
            self.totals = {str(user): Totals(**{k: float(v) for k, v in sums.items() if k in TOTALS})
                           for user, sums in data.get("totals", {}).items()}
        except FileNotFoundError:
            return
        except (OSError, ValueError, TypeError, KeyError, AttributeError, IndexError) as err:  # cut by a crash
            log.warning("gpu ledger: %s unreadable (%s): counting starts again", LEDGER, err)
            self.accounts, self.read_to, self.totals = {}, {}, {}

    def count(self, now: float) -> None:
        """Add what every node's history gained since the last count; forget accounts older than KEEP_S."""
        for path in sorted(self.folder.glob("*.jsonl")) if self.folder.is_dir() else ():
            self._count_node(path)
        self.accounts = {k: a for k, a in self.accounts.items() if now - a.last_at < KEEP_S}
        replace_text(self.folder / LEDGER, json.dumps({"accounts": {k: asdict(a) for k, a in self.accounts.items()},
                                                       "read_to": self.read_to,
                                                       "totals": {u: asdict(t) for u, t in self.totals.items()}}))

    def _count_node(self, path: Path) -> None:
        node = path.stem
        inode, offset, last_at = self.read_to.get(node, (0, 0, 0.0))
        try:
            with path.open("rb") as history:
                now_inode = os.fstat(history.fileno()).st_ino
                if now_inode != inode:  # trimmed since (a new file): from its start, past what was counted
                    offset = 0
                history.seek(offset)
                data = history.read(MAX_READ)
        except OSError:
            return
        end = data.rfind(b"\n") + 1  # whole lines only: a line being written is read next time
        for line in data[:end].splitlines():
            try:
                reading = NodeReading.from_json(line.decode(errors="replace"))
            except ReadingError:
                continue
            if reading.at <= last_at:
                continue
            self._add(reading, reading.at - last_at if last_at else reading.interval_s)
            last_at = reading.at
        self.read_to[node] = (now_inode, offset + end, last_at)

    def _add(self, reading: NodeReading, since_last_s: float) -> None:
        interval = min(reading.interval_s, since_last_s)  # a reader that stopped: the gap is not held time known
        week = week_of(reading.at)
        for gpu in reading.gpus:
            if not gpu.holder:
                continue
            account = self.accounts.get(gpu.holder)
            if account is None or account.user != gpu.user:
                account = self.accounts[gpu.holder] = Account(gpu.holder, gpu.user, first_at=reading.at)
            account.held_s += interval
            totals = self.totals.setdefault(gpu.user, Totals())
            totals.held_s += interval
            if account.week != week:
                account.week, account.week_held_s = week, 0.0
            account.week_held_s += interval
            if gpu.busy is None or reading.error:
                account.unknown_s += interval
                totals.unknown_s += interval
            else:
                account.busy_s += interval * gpu.busy / 100.0
                totals.busy_s += interval * gpu.busy / 100.0
                totals.idle_s += interval if gpu.idle else 0.0
            account.last_at = reading.at

    def of(self, holders: Iterable[str]) -> dict[str, Account]:
        return {h: self.accounts[h] for h in holders if h in self.accounts}

    @classmethod
    def week_held_by(cls, folder: Path, now: float) -> dict[str, float] | None:
        """GPU-hours each user held this week as the GPU watch last counted them (what a usage report's `per_user`
        says, for portal.jobs.budget); None where no watch keeps a ledger."""
        return cls(folder).week_held(now) if (folder / LEDGER).is_file() else None

    def week_held(self, now: float) -> dict[str, float]:
        """GPU-hours each user's servers and jobs held in the week `now` is in."""
        week, held = week_of(now), dict[str, float]()
        for account in self.accounts.values():
            if account.week == week:
                held[account.user] = held.get(account.user, 0.0) + account.week_held_s / 3600
        return held


def week_of(at: float) -> float:
    """When the week `at` is in began (epoch seconds): the Usage page's week (portal.scheduler.usage.week_start)."""
    return week_start(datetime.fromtimestamp(at)).timestamp()
