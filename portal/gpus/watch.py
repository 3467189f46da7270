"""The watch that applies the idle rule (portal.gpus.idle) to every running server and job that holds GPUs.

Each pass takes the scheduler's running holders and the nodes' latest readings (portal.gpus.view.latest), steps
each holder's rule with its user's group setting (gpu_idle_s, gpu_idle_grace_s, gpu_idle_stop_jobs), and returns
what to do as events: WARN or STOP a server, FLAG or STOP a job, CLEAR a warning once its GPUs work again, KEEP
when its user says so. The dashboard runs it and carries the events out (portal.service.gpu_watch: mail, the hub's
stop, the scheduler's cancel); this module decides and remembers, and does nothing else.

What it knows of each holder lives in <readings_dir>/watch.json, and every event is a line of events.jsonl (its
newer part kept, like the readers' histories): both root's, in the readers' directory (0700), written by the
dashboard alone. A user's history (the GPUs page) is their own lines of it.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

from portal.gpus.files import append_lines, replace_text
from portal.gpus.idle import Act, Rule, Watched, holder_state, keep, step
from portal.gpus.readings import HOLDER, USER, NodeReading

RETRY_STOP_S = 120.0  # a stop asked for and still running this long after is asked for again (the hub failed)
# What the watch knew of a holder is forgotten when it was not read for this long (the dashboard was down, the
# scheduler reuses an id): its idle clock starts again, so nothing is ever stopped early on old knowledge.
FORGET_AFTER_S = 600.0
MAX_EVENTS_BYTES = 2 << 20  # the newer half is kept past this: years of a small site's events
KEPT_IN_MEMORY = 5000  # the newest events the pages read from memory
STATE, EVENTS = "watch.json", "events.jsonl"
KEPT = "keep"  # an event's act when its user said "keep it" (not an Act: the rule does not decide it)
log = logging.getLogger("portal.gpus")


@dataclass(frozen=True)
class Holder:
    """A running server or job that holds GPUs, as the scheduler says."""

    id: str
    user: str
    server: bool


@dataclass(frozen=True)
class Event:
    """What the watch decided about one holder, with its reason in words (the mail's, the page's, the log's)."""

    at: float
    holder: str
    user: str
    server: bool
    act: str  # an Act's value, or KEPT
    reason: str
    deadline: float | None = None  # a warning's: when the server stops unless kept

    @classmethod
    def from_dict(cls, data: object) -> Event | None:
        """An event line as written, or None for one that is not (a line cut when the file was trimmed)."""
        if not isinstance(data, dict) or set(data) != {f.name for f in fields(cls)}:
            return None
        ok = (isinstance(data["at"], int | float) and isinstance(data["holder"], str) and isinstance(data["user"], str)
              and isinstance(data["server"], bool) and isinstance(data["reason"], str)
              and data["act"] in (*(a.value for a in Act), KEPT)
              and (data["deadline"] is None or isinstance(data["deadline"], int | float)))
        return cls(**data) if ok else None


def words(seconds: float) -> str:
    """A duration as the mail and the pages say it: "45 s", "30 minutes", "2 h 5 min"."""
    seconds = round(seconds)
    if seconds < 120:
        return f"{seconds} s"
    hours, minutes = divmod(seconds // 60, 60)
    return f"{minutes} minutes" if not hours else f"{hours} h {minutes} min" if minutes else f"{hours} h"


def reason(act: Act, rule: Rule) -> str:
    idle = words(rule.idle_after_s)
    if act is Act.WARN:
        return (f"its GPUs have done nothing (under 5 % busy) for {idle}: it stops in {words(rule.grace_s)} "
                "unless it is kept or they work again")
    if act is Act.FLAG:
        return (f"its GPUs have done nothing (under 5 % busy) for {idle}: a rank that hangs, or an input that "
                "stalled?" + (f" It is cancelled in {words(rule.grace_s)}." if rule.stop_jobs else ""))
    if act is Act.STOP:
        return f"its GPUs did nothing for {idle}, and for the {words(rule.grace_s)} after the warning"
    return "its GPUs work again"


class Watch:
    """The watch's memory (what it knows of each holder) and its decisions. Not thread-safe: one pass at a time,
    on the dashboard's event loop."""

    def __init__(self, folder: Path, clock: Callable[[], float] = time.time):
        self.folder, self._clock = folder, clock
        self.state: dict[str, Watched] = self._load()
        self.rules: dict[str, Rule] = {}  # each watched holder's rule, as of the last pass (for its deadline)
        self._events: list[Event] | None = None  # the newest events, once read (history)

    def _load(self) -> dict[str, Watched]:
        try:
            data = json.loads((self.folder / STATE).read_text())
            known = {key: Watched(**value) for key, value in data["holders"].items()
                     if HOLDER.fullmatch(key) and USER.fullmatch(value.get("user", ""))}
            return {key: w for key, w in known.items() if self._clock() - (w.read_at or 0) < FORGET_AFTER_S}
        except FileNotFoundError:
            return {}
        except (OSError, ValueError, TypeError, KeyError, AttributeError) as err:  # ours, but cut by a crash
            log.warning("gpu watch: %s unreadable (%s): every holder's idle clock starts again", STATE, err)
            return {}

    def once(self, holders: Iterable[Holder], readings: Mapping[str, NodeReading],
             rule_of: Callable[[Holder], Rule | None], unsure: Iterable[str] = ()) -> list[Event]:
        """One pass: each holder's rule stepped on the latest readings; the events it decided. `rule_of`: None for
        a holder whose user is never watched (gpu_idle_s 0). `unsure`: running holders whose rule could not be
        told this pass (the hub did not answer): kept as they are, nothing decided."""
        events, seen = [], set(unsure)
        for holder in holders:
            seen.add(holder.id)
            watched = self.state.get(holder.id)
            if watched is None or (watched.user, watched.server) != (holder.user, holder.server):  # a reused id
                watched = Watched(holder.id, holder.user, holder.server)
            rule = rule_of(holder)
            if rule is None:
                self.state[holder.id] = replace(watched, idle_since=None, warned_at=None)
                continue
            self.rules[holder.id] = rule
            at, idle = holder_state(readings.values(), holder.id)
            if watched.stopped_at is not None and at - watched.stopped_at < RETRY_STOP_S:
                continue  # its stop is under way
            watched, act = step(replace(watched, stopped_at=None), at, idle, rule)
            if act is Act.STOP:
                watched = replace(watched, stopped_at=at)
            self.state[holder.id] = watched
            if act is not None:
                deadline = watched.warned_at + rule.grace_s if act is Act.WARN and watched.warned_at else None
                events.append(Event(at, holder.id, holder.user, holder.server, act.value, reason(act, rule),
                                    deadline))
        for gone in set(self.state) - seen:  # ended, or stopped: forgotten
            del self.state[gone]
            self.rules.pop(gone, None)
        self._save(events)
        return events

    def keep(self, user: str, holder: str) -> Event | None:
        """`user` says "keep it" of their own warned server: the warning goes and its idle clock starts again.
        None when there is no such warning (not theirs, not warned, or already stopped)."""
        watched = self.state.get(holder)
        if watched is None or watched.user != user or watched.warned_at is None:
            return None
        now = self._clock()
        self.state[holder] = keep(watched, now)
        event = Event(now, holder, user, watched.server, KEPT, "its user said keep it: its idle clock starts again")
        self._save([event])
        return event

    def warnings(self, user: str) -> list[Watched]:
        """The user's servers and jobs warned or flagged now."""
        return [w for w in self.state.values() if w.user == user and w.warned_at is not None]

    def deadline(self, watched: Watched) -> float | None:
        """When a warned server stops unless kept (a flagged job: when it is cancelled, where the site says)."""
        rule = self.rules.get(watched.holder)
        if rule is None or watched.warned_at is None or not (watched.server or rule.stop_jobs):
            return None
        return watched.warned_at + rule.grace_s

    def history(self, user: str | None = None, limit: int = 50) -> list[Event]:
        """The newest events first, a user's own (None: everyone's, for an admin). Read from the file once, then
        kept in memory as they are written (KEPT_IN_MEMORY of them): a page's poll never reads the file."""
        if self._events is None:
            self._events = self._read_events()
        found = []
        for event in reversed(self._events):
            if user is None or event.user == user:
                found.append(event)
                if len(found) >= limit:
                    break
        return found

    def _read_events(self) -> list[Event]:
        try:
            data = (self.folder / EVENTS).read_bytes()
        except OSError:
            return []
        found = []
        for line in data.decode(errors="replace").splitlines()[-KEPT_IN_MEMORY:]:
            try:
                event = Event.from_dict(json.loads(line))
            except ValueError:
                event = None
            if event is not None:
                found.append(event)
        return found

    def _save(self, events: list[Event]) -> None:
        self.folder.mkdir(mode=0o700, exist_ok=True)
        replace_text(self.folder / STATE, json.dumps({"holders": {k: asdict(v) for k, v in self.state.items()}}))
        if not events:
            return
        if self._events is not None:
            self._events = (self._events + events)[-KEPT_IN_MEMORY:]
        append_lines(self.folder / EVENTS, (json.dumps(asdict(e), separators=(",", ":")) + "\n" for e in events),
                     MAX_EVENTS_BYTES)
        for event in events:
            log.info("gpu watch: %s %s %s of %s: %s", event.act, "server" if event.server else "job",
                     event.holder, event.user, event.reason)
