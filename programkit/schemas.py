"""The shapes of the JSON records a run writes and the dashboard reads back (issue 40, item 3): one schema per
record, checked by the writer before it writes and by the reader before anything is shown.

A schema is declared from a few parts (`Text`, `Whole`, `Number`, `Flag`, `Scalar`, `ListOf`, `MapOf`, `Record`),
each saying in words what it expects. `check(schema, value, record)` walks the value and raises `SchemaError`
at the first field that does not fit, naming the field by its dotted path and what was found:

    model card: checkpoint.files is 5 (a number); expected a list of files

Only the standard library, and nothing of the hub side (`portal`): the training payload writes with it, the
portal reads with it. A record's unknown fields (a newer version's) are left as they are and never looked at.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["CARD_FORMAT", "EPOCH_RECORD", "MODEL_CARD", "SWEEP_PLAN", "TRIAL_RECORD", "Either", "Exactly", "Flag",
           "ListOf", "MapOf", "Number", "Record", "Scalar", "SchemaError", "Text", "Whole", "check", "json_kind"]

MAX_TEXT = 4096  # any one string (a data directory's path is the longest)
MAX_ITEMS = 1000  # any one list or object of a record
MAX_KEY = 200  # a key of an object whose keys are data (a split's name, a setting's)
SHOWN_CHARS = 40  # of a wrong value, in the reason given


class SchemaError(ValueError):
    """A record that does not fit its schema: `field` is the dotted path of the first field that does not."""

    def __init__(self, record: str, field: str, reason: str):
        super().__init__(f"{record}: {field} {reason}")
        self.field = field


def json_kind(value: Any) -> str:
    """What a JSON value is, in words: "a number", "a string", "a list", ..."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list | tuple):
        return "a list"
    return "an object" if isinstance(value, Mapping) else type(value).__name__


def _shown(value: Any) -> str:
    try:
        text = json.dumps(value, default=str)
    except (ValueError, RecursionError):
        text = "..."
    return text if len(text) <= SHOWN_CHARS else f"{text[:SHOWN_CHARS]}..."


class _Wrong(Exception):
    """Raised inside the walk; turned into SchemaError with the record's name at the top."""

    def __init__(self, where: str, reason: str):
        super().__init__(where, reason)
        self.where, self.reason = where, reason


@dataclass(frozen=True)
class Shape:
    """One field's shape: `expected` says it in words; `nullable`: null is allowed too."""

    expected: str
    nullable: bool = field(default=False, kw_only=True)

    def check(self, value: Any, where: str) -> None:
        if value is None and self.nullable:
            return
        if not self.fits(value):
            self.wrong(value, where)
        self.inside(value, where)

    def fits(self, value: Any) -> bool:
        raise NotImplementedError

    def inside(self, value: Any, where: str) -> None:
        """The parts of a value that fits (a list's items, an object's fields)."""

    def wrong(self, value: Any, where: str) -> None:
        expected = f"{self.expected} or null" if self.nullable else self.expected
        found = "null" if value is None else f"{_shown(value)} ({json_kind(value)})"
        raise _Wrong(where, f"is {found}; expected {expected}")


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


@dataclass(frozen=True)
class Text(Shape):
    expected: str = f"a string of at most {MAX_TEXT} characters"
    max_length: int = MAX_TEXT

    def fits(self, value: Any) -> bool:
        return isinstance(value, str) and len(value) <= self.max_length


@dataclass(frozen=True)
class Whole(Shape):
    low: int = 0
    high: int = 10**15

    def fits(self, value: Any) -> bool:
        return isinstance(value, int) and not isinstance(value, bool) and self.low <= value <= self.high


@dataclass(frozen=True)
class Exactly(Shape):
    """One string and no other (a record's format)."""

    value: str = ""

    def fits(self, value: Any) -> bool:
        return isinstance(value, str) and value == self.value


@dataclass(frozen=True)
class Number(Shape):
    expected: str = "a number"

    def fits(self, value: Any) -> bool:
        return _number(value)


@dataclass(frozen=True)
class Flag(Shape):
    expected: str = "true or false"

    def fits(self, value: Any) -> bool:
        return isinstance(value, bool)


@dataclass(frozen=True)
class Scalar(Shape):
    """A string, a number, true/false or null: one setting's value."""

    expected: str = "a string, a number, true/false or null"

    def fits(self, value: Any) -> bool:
        return value is None or isinstance(value, bool) or _number(value) or Text().fits(value)


@dataclass(frozen=True)
class ListOf(Shape):
    item: Shape = field(default_factory=Scalar)
    max_items: int = MAX_ITEMS

    def fits(self, value: Any) -> bool:
        return isinstance(value, list) and len(value) <= self.max_items

    def inside(self, value: Any, where: str) -> None:
        for index, item in enumerate(value):
            self.item.check(item, f"{where}[{index}]")


@dataclass(frozen=True)
class MapOf(Shape):
    """An object whose keys are data (splits, settings), each holding a value of one shape."""

    value: Shape = field(default_factory=Scalar)
    max_items: int = MAX_ITEMS

    def fits(self, value: Any) -> bool:
        return isinstance(value, Mapping) and len(value) <= self.max_items

    def inside(self, value: Any, where: str) -> None:
        for key, item in value.items():
            if not Text(max_length=MAX_KEY).fits(key) or any(ord(ch) < 32 for ch in key):
                raise _Wrong(where, f"has the key {_shown(key)}; expected keys of at most {MAX_KEY} characters")
            self.value.check(item, f"{where}.{key}")


@dataclass(frozen=True)
class Record(Shape):
    """An object with named fields; those in `optional` may be left out. Other fields are not looked at."""

    fields: Mapping[str, Shape] = field(default_factory=dict)
    optional: frozenset[str] = frozenset()

    def fits(self, value: Any) -> bool:
        return isinstance(value, Mapping)

    def inside(self, value: Any, where: str) -> None:
        for name, shape in self.fields.items():
            path = f"{where}.{name}" if where else name
            if name in value:
                shape.check(value[name], path)
            elif name not in self.optional:
                raise _Wrong(path, f"is missing; expected {shape.expected}")


@dataclass(frozen=True)
class Either(Shape):
    """One of several shapes (a sweep's parameter: its choices, or a range): the first that fits; when none does,
    the error of the one whose kind matches (an object with `choices` is read as choices)."""

    options: tuple[Shape, ...] = ()
    pick: Any = None  # value -> the index of the option to report against when none fits

    def check(self, value: Any, where: str) -> None:
        if value is None and self.nullable:
            return
        errors = []
        for option in self.options:
            try:
                option.check(value, where)
                return
            except _Wrong as wrong:
                errors.append(wrong)
        chosen = self.pick(value) if self.pick is not None else None
        if chosen is not None and 0 <= chosen < len(errors):
            raise errors[chosen]
        self.wrong(value, where)

    def fits(self, value: Any) -> bool:
        return any(option.fits(value) for option in self.options)


def check(schema: Shape, value: Any, record: str) -> None:
    """SchemaError naming `record` and the first field of `value` that does not fit `schema`; never anything
    else, whatever `value` holds."""
    try:
        schema.check(value, "")
    except _Wrong as wrong:
        raise SchemaError(record, wrong.where or "the whole record", wrong.reason) from None


# --- the records -------------------------------------------------------------------------------------------------

SHA256 = Text("a SHA-256 in hex (64 characters)", max_length=64)
MAYBE_TEXT = Text(nullable=True)

# model_card.json (programkit.model_card.build_card); its `format` first, so another record is named as such.
CARD_FORMAT = "dsportal-model-card-1"
MODEL_CARD = Record(f"an object of format {CARD_FORMAT}", fields={
    "format": Exactly(CARD_FORMAT, value=CARD_FORMAT),
    "spec": MapOf("an object of the run's settings (strings, numbers, true/false or null)"),
    "epochs_done": Whole("a whole number of epochs 0-100000", high=100_000),
    "code": Record("an object with dsportal, git_commit and git_dirty", fields={
        "dsportal": MAYBE_TEXT, "git_commit": Text("a git commit (a string)", nullable=True),
        "git_dirty": Flag(nullable=True)}),
    # frameworks: each program's own (name -> version); tensorflow and horovod: where a card written before them
    # held chexnet's.
    "environment": Record("an object with python and frameworks", fields={
        "python": MAYBE_TEXT, "numpy": MAYBE_TEXT,
        "frameworks": MapOf("an object of versions by framework", value=MAYBE_TEXT, max_items=20),
        "tensorflow": MAYBE_TEXT, "horovod": MAYBE_TEXT, "image_digest": MAYBE_TEXT, "image_digest_from": MAYBE_TEXT},
        optional=frozenset({"numpy", "frameworks", "tensorflow", "horovod", "image_digest", "image_digest_from"})),
    "data": Record("an object with dir, kind and counts", fields={
        "dir": Text(), "kind": Text(),
        "counts": MapOf("an object of image counts per split", value=Whole("a whole number of images")),
        "splits": MapOf("an object of fingerprints per split", value=Record(
            "an object with images, image_list_sha256, patients and patients_sha256", fields={
                "images": Whole("a whole number of images"), "image_list_sha256": SHA256,
                "patients": Whole("a whole number of patients"), "patients_sha256": SHA256})),
        "patient_split_sha256": SHA256, "note": Text()},
        optional=frozenset({"splits", "patient_split_sha256", "note"})),
    "auroc": Record("an object with per_class, mean and paper_mean", fields={
        "per_class": ListOf("a list of classes with their AUROC", item=Record(
            "an object with class, auroc and paper", fields={
                "class": Text(), "auroc": Number(nullable=True), "paper": Number(nullable=True)})),
        "mean": Number(nullable=True), "paper_mean": Number(nullable=True)}),
    "checkpoint": Record("an object with prefix and files", fields={
        "prefix": MAYBE_TEXT,
        "files": ListOf("a list of files", item=Record("an object with file, bytes and sha256", fields={
            "file": Text(), "bytes": Whole("a whole number of bytes"), "sha256": SHA256}))}),
})

# sweep.json (portal.records.sweep.SweepPlan.to_dict, written at submit; read by programkit.sweep.Plan): each
# parameter is its choices or a range.
PARAMETER = Either("an object with choices (a list), or low and high (numbers) and log (true/false)", options=(
    Record("an object with choices", fields={"choices": ListOf("a list of choices", max_items=100)}),
    Record("an object with low, high and log", fields={"low": Number(), "high": Number(), "log": Flag()},
           optional=frozenset({"log"}))),
    pick=lambda value: 0 if isinstance(value, Mapping) and "choices" in value else 1)
SWEEP_PLAN = Record("an object with space, sampler, pruner, min_epochs, seed and epochs", fields={
    "space": MapOf("an object of the parameters searched", value=PARAMETER, max_items=20),
    "sampler": Text(max_length=40), "pruner": Text(max_length=40),
    "min_epochs": Whole("a whole number of epochs", high=100_000), "seed": Whole("a whole number", high=2**32),
    "epochs": Whole("a whole number of epochs 1-100000", low=1, high=100_000),
    "trials": Whole("a whole number of trials", low=1, high=10_000),
    "parallel": Whole("a whole number of trials", low=1, high=10_000)},
    optional=frozenset({"trials", "parallel"}))
# trials/<task>/trial.json (programkit.sweep.write_trial_file): the trial a task trains, and its parameters' values.
TRIAL_RECORD = Record("an object with number, task and params", fields={
    "number": Whole("a trial's number"), "task": Whole("a task's index"),
    "params": MapOf("an object of the trial's parameter values", max_items=20)})

# One line of the per-epoch record (programkit.tblog.EpochScalars: checkpoints/epochs.jsonl, and the `dsportal.epoch`
# lines of a job's log), as every training program writes it.
EPOCH_RECORD = Record("an object with epoch, logdir and scalars", fields={
    "epoch": Whole("a whole number of epochs 1-100000", low=1, high=100_000),
    "logdir": Text(),
    "scalars": MapOf("an object of scalars by tag (numbers or null)", value=Number(nullable=True)),
    "images_per_sec": Number(nullable=True), "checkpoint": MAYBE_TEXT, "seconds": Number(nullable=True),
    "program": MAYBE_TEXT},
    optional=frozenset({"images_per_sec", "checkpoint", "seconds", "program"}))
