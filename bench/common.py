"""What the benchmarks share: a cached synthetic data set, repeated timings, a plain-text table, counter
differences, and this machine's processes as /proc shows them."""

from __future__ import annotations

import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

BENCH_DIR = Path("/var/tmp/dsportal-bench")


@dataclass(frozen=True)
class Measurement:
    name: str
    samples: tuple[float, ...]  # images/sec, one per repeat

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def spread(self) -> str:
        return f"{min(self.samples):,.0f}-{max(self.samples):,.0f}"

    def as_row(self) -> dict[str, object]:
        """The row as bench.results saves it and docs/benchmarks_chart.py reads it (data["rows"])."""
        return {"name": self.name, "median": self.median, "min": min(self.samples), "max": max(self.samples),
                "samples": list(self.samples)}


def synthetic_set(images: int, size: int, root: Path = BENCH_DIR) -> Path:
    """A ChestX-ray14-layout data set, made once per machine and reused (writing 1024x1024 PNGs takes a while)."""
    from programkit.data.synthetic import write_synthetic

    out = root / f"chestxray14-{images}x{size}"
    if not (out / "Data_Entry_2017.csv").exists():
        print(f"writing {images} synthetic {size}x{size} images to {out} (once per machine)", file=sys.stderr)
        write_synthetic(out, images=images, size=size, seed=0)
    return out


def records_of(source: Path, shards: int, storage=None) -> Path:
    """TFRecords of a data set, converted once and reused; `storage` (a chexnet.data.tfrecords.Storage) None keeps
    the original PNGs."""
    from chexnet.data.tfrecords import PNG, Storage, convert

    storage = storage or Storage.of(PNG)
    stored = "" if storage.encoding == PNG else f"-{storage.encoding}{storage.short_side}q{storage.quality or 0}"
    out = source.with_name(source.name + f"{stored}-tfrecords{shards}")
    if not (out / "manifest.json").exists():
        convert(source, out, shards=shards, storage=storage)
    return out


def table(title: str, rows: list[Measurement], reference: Measurement, reference_label: str) -> str:
    """Medians with their spread, and each row's ratio to the reference row, measured in the same run."""
    width = max(len(r.name) for r in rows) + 2
    lines = [title, f"{'':{width}}{'images/s (median)':>18}{'spread':>16}{'ratio to ' + reference_label:>22}"]
    for row in rows:
        ratio = row.median / reference.median if reference.median else float("nan")
        lines.append(f"{row.name:{width}}{row.median:>18,.0f}{row.spread:>16}{ratio:>22.2f}")
    return "\n".join(lines)


def table_with_limits(title: str, rows: list[Measurement], limit_of: dict[str, str]) -> str:
    """Like `table`, but each row has its own reference (`limit_of`: row name -> the name of its limit's row),
    named in a last column; a limit's own row has the ratio 1.00."""
    by_name = {r.name: r for r in rows}
    width = max(len(r.name) for r in rows) + 2
    lines = [title, f"{'':{width}}{'images/s (median)':>18}{'spread':>16}{'ratio to limit':>16}  limit used"]
    for row in rows:
        limit = by_name[limit_of.get(row.name, row.name)]
        ratio = row.median / limit.median if limit.median else float("nan")
        lines.append(f"{row.name:{width}}{row.median:>18,.0f}{row.spread:>16}{ratio:>16.2f}  {limit.name}")
    return "\n".join(lines)


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A Markdown table (reads as plain text too), columns padded to their widest cell."""
    cells = [[str(c) for c in header], *[[str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |" for row in cells]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def counts_delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    """What was counted between two readings of the same counters (one first seen later started at 0)."""
    return {k: after[k] - before.get(k, 0) for k in sorted(after) if after[k] != before.get(k, 0)}


@dataclass(frozen=True)
class Proc:
    """One process as /proc shows it: what the benchmarks need to tell whose it is."""

    pid: int
    ppid: int
    comm: str
    argv: tuple[str, ...]
    cgroup: str = ""  # /proc/<pid>/cgroup's text: a pod's processes name its UID there


def proc_of(pid: int, stat: str, cmdline: bytes, cgroup: str = "") -> Proc:
    """A process from its /proc/<pid>/stat line (the command in parentheses may hold any character), cmdline and
    cgroup."""
    head, _, rest = stat.rpartition(")")
    argv = tuple(arg.decode(errors="replace") for arg in cmdline.split(b"\0") if arg)
    return Proc(pid, int(rest.split()[1]), head.partition("(")[2], argv, cgroup)


def processes(with_cgroup: bool = False) -> list[Proc]:
    """Every process of this machine that could be read (one may exit while it is read)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            found.append(proc_of(int(proc.name), (proc / "stat").read_text(), (proc / "cmdline").read_bytes(),
                                 (proc / "cgroup").read_text() if with_cgroup else ""))
        except (OSError, ValueError, IndexError):
            continue
    return found
