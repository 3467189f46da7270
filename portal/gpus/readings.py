"""A node's GPUs as its reader saw them: the one record every GPU view reads (the job page, the lab, the Usage,
Cluster and Operations pages, the idle check), and its schema.

A reading crosses a process boundary (the node's reader writes it, the portal reads it), so the portal checks it
like any answer before a page uses it (`NodeReading.from_json`: fields, types, ranges, sizes), with an error that
names the field. `busy` is the percent of the reading's interval the GPU worked; None when the reader could not
tell, which no check counts as idle (`idle`).
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass
from typing import Any

from portal.errors import BadAnswer
from portal.inputs import finite_json

SOURCES = ("nvml", "standin")  # standin: the boxes' FAKE GPUs (portal/gpus/standin.py)
MAX_GPUS = 64  # per node
MAX_BYTES = 256 * 1024
MAX_INTERVAL_S = 3600.0
MAX_MEMORY_MIB = 1 << 24  # 16 TiB: far above any GPU's
IDLE_BELOW = 5.0  # percent: a GPU busy less than this over an interval did nothing worth keeping it for
NODE = re.compile(r"[A-Za-z0-9][A-Za-z0-9.-]{0,62}")
HOLDER = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/-]{0,252}")  # a Slurm job id ("123", "123_4"), a pod ("ns/name")
USER = re.compile(r"[a-z_][a-z0-9._-]{0,31}")
UUID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,95}")


class ReadingError(BadAnswer):
    """A node's reading that is not what its schema allows: the field, and why."""


@dataclass(frozen=True)
class GpuReading:
    index: int  # on its node
    uuid: str = ""  # NVML's "GPU-8c1f...", the stand-in's "FAKE-<node>-<index>"
    busy: float | None = None  # percent of the interval it worked; None: unknown
    memory_used_mib: int | None = None
    memory_total_mib: int | None = None
    holder: str = ""  # the job or server that holds it (the scheduler's id); "": free
    user: str = ""  # the holder's user

    @property
    def idle(self) -> bool:
        """Held, known, and busy less than IDLE_BELOW: never true of an unknown reading."""
        return bool(self.holder) and self.busy is not None and self.busy < IDLE_BELOW


@dataclass(frozen=True)
class NodeReading:
    node: str
    at: float  # epoch seconds, when the reading was taken
    interval_s: float  # what `busy` covers: the seconds before `at`
    source: str
    gpus: tuple[GpuReading, ...] = ()
    error: str = ""  # the reader failed: what it said (every GPU unknown)

    def held_by(self, holder: str) -> tuple[GpuReading, ...]:
        return tuple(gpu for gpu in self.gpus if gpu.holder == holder)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "gpus": [asdict(gpu) for gpu in self.gpus]}

    @classmethod
    def from_json(cls, text: str) -> NodeReading:
        return cls.from_dict(finite_json(text, MAX_BYTES, ReadingError))

    @classmethod
    def from_dict(cls, data: object) -> NodeReading:
        if not isinstance(data, dict):
            raise ReadingError(f"a reading: a {type(data).__name__}, not an object")
        _only(data, ("node", "at", "interval_s", "source", "gpus", "error"), "a reading")
        gpus = data.get("gpus", [])
        if not isinstance(gpus, list) or len(gpus) > MAX_GPUS:
            raise ReadingError(f"gpus: not a list of at most {MAX_GPUS} GPUs")
        read = tuple(_gpu(gpu, f"gpus[{i}]") for i, gpu in enumerate(gpus))
        if len({gpu.index for gpu in read}) != len(read):
            raise ReadingError("gpus: an index twice")
        source = data.get("source")
        if source not in SOURCES:
            raise ReadingError(f"source: {str(source)[:20]!r}; allowed: {', '.join(SOURCES)}")
        return cls(node=_text(data, "node", NODE, required=True), at=_number(data, "at", 1.0, 1e11),
                   interval_s=_number(data, "interval_s", 0.0, MAX_INTERVAL_S), source=source, gpus=read,
                   error=_free_text(data, "error", 500))


def _gpu(data: object, where: str) -> GpuReading:
    if not isinstance(data, dict):
        raise ReadingError(f"{where}: a {type(data).__name__}, not an object")
    _only(data, ("index", "uuid", "busy", "memory_used_mib", "memory_total_mib", "holder", "user"), where)
    index = _whole(data, "index", MAX_GPUS - 1, where)
    if index is None:
        raise ReadingError(f"{where}.index: missing")
    busy = data.get("busy")
    return GpuReading(index=index, uuid=_text(data, "uuid", UUID, where=where),
                      busy=None if busy is None else _number(data, "busy", 0.0, 100.0, where),
                      memory_used_mib=_whole(data, "memory_used_mib", MAX_MEMORY_MIB, where),
                      memory_total_mib=_whole(data, "memory_total_mib", MAX_MEMORY_MIB, where),
                      holder=_text(data, "holder", HOLDER, where=where), user=_text(data, "user", USER, where=where))


def _only(data: dict, allowed: tuple[str, ...], where: str) -> None:
    extra = sorted(str(key)[:40] for key in data if key not in allowed)
    if extra:
        raise ReadingError(f"{where}: unknown field(s) {', '.join(extra)}; allowed: {', '.join(allowed)}")


def _label(where: str, name: str) -> str:
    return f"{where}.{name}" if where else name


def _number(data: dict, name: str, low: float, high: float, where: str = "") -> float:
    value = data.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ReadingError(f"{_label(where, name)}: a {type(value).__name__}, not a number")
    if not math.isfinite(value) or not low <= value <= high:
        raise ReadingError(f"{_label(where, name)}: {str(value)[:20]} is not in [{low}, {high}]")
    return float(value)


def _whole(data: dict, name: str, high: int, where: str) -> int | None:
    value = data.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= high:
        raise ReadingError(f"{_label(where, name)}: {str(value)[:20]} is not a whole number in [0, {high}]")
    return value


def _text(data: dict, name: str, pattern: re.Pattern[str], required: bool = False, where: str = "") -> str:
    value = data.get(name, "")
    if not isinstance(value, str):
        raise ReadingError(f"{_label(where, name)}: a {type(value).__name__}, not text")
    if (value or required) and not pattern.fullmatch(value):
        raise ReadingError(f"{_label(where, name)}: {value[:40]!r} is not allowed here ({pattern.pattern})")
    return value


def _free_text(data: dict, name: str, cap: int) -> str:
    value = data.get(name, "")
    if not isinstance(value, str) or len(value) > cap or not value.isprintable():
        raise ReadingError(f"{name}: not printable text of at most {cap} characters")
    return value
