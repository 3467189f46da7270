"""Which runs the experiments page lists: by name, tag or id, date, state, program and hyperparameters.

The same arguments on the page and in `GET api/experiments`, each parsed strictly (a user's query is hostile): an
argument that is not one says so, naming it (InputError: a 400). Hyperparameters are tested with `where`, tests
separated by commas: `lr<0.001,batch_size=16,model=densenet121` (operators = != < <= > >=; < and > compare
numbers only).

Pure: arguments in, a RunFilter out; `matches` tests one run (portal.service.experiments.Run).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

from portal.inputs import InputError, shown
from portal.service.experiments import Run

__all__ = ["ARGUMENTS", "ParamTest", "RunFilter", "matches", "parse_filter"]

ARGUMENTS = ("q", "tag", "state", "program", "since", "until", "where")
MAX_TEXT = 80  # a search word, a tag, a state, a program
MAX_WHERE = 400
MAX_TESTS = 10
STATE = re.compile(r"[A-Z][A-Z_]{0,31}")
PROGRAM = re.compile(r"[a-z][a-z0-9_-]{0,39}")
TAG = re.compile(r"[a-z0-9][a-z0-9-]{0,23}")  # portal.service.run_labels keeps tags of this spelling
TEST = re.compile(r"(?P<name>[a-z_][a-z0-9_]{0,39})\s*(?P<op>!=|<=|>=|=|<|>)\s*(?P<value>[A-Za-z0-9_.+-]{1,40})")
OPERATORS: dict[str, Callable[[Any, Any], bool]] = {
    "=": lambda a, b: a == b, "!=": lambda a, b: a != b, "<": lambda a, b: a < b, "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b, ">=": lambda a, b: a >= b}


@dataclass(frozen=True)
class ParamTest:
    name: str
    op: str
    value: float | str | bool

    def __str__(self) -> str:
        return f"{self.name}{self.op}{self.value}"

    def holds(self, params: Mapping[str, Any]) -> bool:
        """Whether the run's hyperparameter passes; a run without it fails every test but `!=`."""
        if self.name not in params:
            return self.op == "!="
        have = params[self.name]
        if isinstance(self.value, bool) or isinstance(have, bool):
            return OPERATORS[self.op](have, self.value) if self.op in ("=", "!=") else False
        if isinstance(self.value, float):
            if not isinstance(have, int | float):
                return self.op == "!="
            return OPERATORS[self.op](float(have), self.value)
        return OPERATORS[self.op](str(have), self.value)


@dataclass(frozen=True)
class RunFilter:
    q: str = ""  # a part of the run's name, id or a tag
    tag: str = ""
    state: str = ""
    program: str = ""
    since: date | None = None
    until: date | None = None
    where: tuple[ParamTest, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"q": self.q, "tag": self.tag, "state": self.state, "program": self.program,
                "since": self.since.isoformat() if self.since else "",
                "until": self.until.isoformat() if self.until else "", "where": ",".join(map(str, self.where))}


def _text(args: Mapping[str, str], name: str, pattern: re.Pattern | None, allowed: str) -> str:
    value = (args.get(name) or "").strip()
    if len(value) > MAX_TEXT or (value and pattern is not None and not pattern.fullmatch(value)) or \
            any(not ch.isprintable() for ch in value):
        raise InputError(name, f"{shown(value)} is not allowed; allowed: {allowed}")
    return value


def _date(args: Mapping[str, str], name: str) -> date | None:
    value = (args.get(name) or "").strip()
    if not value:
        return None
    try:
        if len(value) != 10:
            raise ValueError
        return date.fromisoformat(value)
    except ValueError:
        raise InputError(name, f"{shown(value)} is not a date; allowed: YYYY-MM-DD or empty") from None


def _value(text: str) -> float | str | bool:
    if text in ("true", "false"):
        return text == "true"
    try:
        number = float(text)
    except ValueError:
        return text
    return number if math.isfinite(number) else text


def parse_where(value: str) -> tuple[ParamTest, ...]:
    allowed = ("allowed: tests separated by commas, each <hyperparameter><op><value> with op one of = != < <= > >= "
               "(e.g. lr<0.001,batch_size=16)")
    if len(value) > MAX_WHERE:
        raise InputError("where", f"{len(value)} characters; {allowed}, at most {MAX_WHERE} characters")
    tests = []
    for part in (p.strip() for p in value.split(",")):
        if not part:
            continue
        match = TEST.fullmatch(part)
        if match is None:
            raise InputError("where", f"{shown(part)} is not a test; {allowed}")
        test = ParamTest(match["name"], match["op"], _value(match["value"]))
        if test.op in ("<", "<=", ">", ">=") and not isinstance(test.value, float):
            raise InputError("where", f"{shown(part)}: {test.op} compares numbers; allowed: a number after it, or "
                                      "= or != for a word")
        tests.append(test)
    if len(tests) > MAX_TESTS:
        raise InputError("where", f"{len(tests)} tests; allowed: at most {MAX_TESTS}")
    return tuple(tests)


def parse_filter(args: Mapping[str, str]) -> RunFilter:
    """The filter the arguments ask for (each absent or empty: not filtered on); InputError naming the first
    argument that is not allowed."""
    since, until = _date(args, "since"), _date(args, "until")
    if since and until and since > until:
        raise InputError("until", f"{until} is before since ({since}); allowed: a date on or after it")
    return RunFilter(q=_text(args, "q", None, f"printable text of at most {MAX_TEXT} characters"),
                     tag=_text(args, "tag", TAG, "a tag: lower-case letters, digits and -, at most 24"),
                     state=_text(args, "state", STATE, "a state in capitals (RUNNING, COMPLETED, PRUNED, ...)"),
                     program=_text(args, "program", PROGRAM, "a training program's name (chexnet, chexnet-torch)"),
                     since=since, until=until, where=parse_where(args.get("where") or ""))


def _day(submitted_at: str) -> date | None:
    try:
        return datetime.fromisoformat(submitted_at).date()
    except (TypeError, ValueError):
        return None


def matches(run: Run, wanted: RunFilter) -> bool:
    """Whether the run is one the filter asks for (dates: the day it was submitted, both ends included)."""
    if wanted.q and not any(wanted.q.lower() in text.lower() for text in (run.name, str(run.id), *run.tags)):
        return False
    if wanted.tag and wanted.tag not in run.tags:
        return False
    if wanted.state and run.state != wanted.state:
        return False
    if wanted.program and run.program != wanted.program:
        return False
    if wanted.since or wanted.until:
        day = _day(run.submitted_at)
        if day is None or (wanted.since and day < wanted.since) or (wanted.until and day > wanted.until):
            return False
    return all(test.holds(run.params) for test in wanted.where)
