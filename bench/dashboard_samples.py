"""The dashboard bench's samples: latencies of one kind of request with who asked them and when, their
percentiles, and where the slow ones were (bench.dashboard)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

TARGET_P99_MS = 250.0


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100), nearest rank: always a value that was measured. NaN for no values."""
    if not 0 <= q <= 100:
        raise ValueError(f"q is {q}; allowed: 0-100")
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[max(1, math.ceil(q / 100 * len(ordered))) - 1]


@dataclass
class Samples:
    """Latencies (ms) and errors of one kind of request."""

    latencies_ms: list[float] = field(default_factory=list)
    errors: int = 0
    first_error: str = ""
    asked: list[tuple[float, str]] = field(default_factory=list)  # per latency: (seconds into the run, who)

    def add(self, ms: float, error: str | None = None, at: float = math.nan, who: str = "") -> None:
        self.latencies_ms.append(ms)
        self.asked.append((at, who))
        if error is not None:
            self.errors += 1
            self.first_error = self.first_error or error

    def figures(self) -> dict[str, float | int]:
        return {"count": len(self.latencies_ms), "p50_ms": percentile(self.latencies_ms, 50),
                "p99_ms": percentile(self.latencies_ms, 99), "max_ms": max(self.latencies_ms, default=math.nan),
                "errors": self.errors}

    def row(self, name: str) -> list[object]:
        f = self.figures()
        return [name, f["count"], f"{f['p50_ms']:.1f}", f"{f['p99_ms']:.1f}", f"{f['max_ms']:.1f}", f["errors"]]


def slow_reads(samples: Samples, over_ms: float = TARGET_P99_MS) -> str:
    """Who asked the reads slower than `over_ms` and when: 'of 12000 reads, 120 took over 250 ms: 80 of the
    submitters' pages, 40 of the others'; in 2 bursts (seconds into the run: 14, 44)': a burst (a second with
    at least half the slow reads of the busiest such second) is the dashboard stalled for everyone; a kind of
    user's pages, what their requests do."""
    slow = [(at, who) for ms, (at, who) in zip(samples.latencies_ms, samples.asked, strict=True) if ms > over_ms]
    if not slow:
        return f"of {len(samples.latencies_ms)} reads none took over {over_ms:g} ms"
    by_who: dict[str, int] = {}
    per_second: dict[int, int] = {}
    for at, who in slow:
        by_who[who or "unnamed"] = by_who.get(who or "unnamed", 0) + 1
        if not math.isnan(at):
            per_second[int(at)] = per_second.get(int(at), 0) + 1
    bursts = sorted(sec for sec, n in per_second.items() if n >= max(2, max(per_second.values(), default=0) / 2))
    whose = ", ".join(f"{n} of the {who}s' pages" for who, n in sorted(by_who.items(), key=lambda kv: -kv[1]))
    return (f"of {len(samples.latencies_ms)} reads, {len(slow)} took over {over_ms:g} ms: {whose}; "
            f"busiest seconds into the run: {', '.join(map(str, bursts[:10])) or 'none'}")
