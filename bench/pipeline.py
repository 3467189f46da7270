"""Input pipeline benchmark: the `sequential` and `parallel` pipelines on original PNGs and the `parallel` one on
resized JPEG records, each against the decode limit of what it reads, per core, broken down by stage, and what that
means for an H100.

    python -m bench.pipeline [--cores 1,2] [--images 256] [--size 1024] [--batch-size 32] [--image-size 224]
                             [--short-side 256] [--quality 95] [--repeats 5] [--seconds 2] [--threads N]
                             [--ablation] [--threads-ablation]

The data set is synthetic ChestX-ray14 (`--size` x `--size` greyscale PNGs, 1024 as the real set). The PNG rows
read TFRecords of the original PNG bytes (decode + resize to `--image-size` per image); the JPEG rows read the same
images converted by `python -m chexnet.data.tfrecords --encoding jpeg` (short side `--short-side`), from which
training decodes only a random `--image-size` crop. A decode limit is read + the same decode only, on all cores,
batched, nothing else: the best this machine can deliver from those records. No training step runs; the pipeline
delivers whatever `train_dataset` delivers (its dtype is printed).

`--cores`: each count of cores is measured in a process of its own, pinned to that many cores
(bench.pipeline_worker), and images/s per core is reported. Every run also breaks the JPEG pipeline's cost per
image down by stage (read, decode, crop, flip, batch, and the host float32 normalisation the model no longer
needs), and states how many cores one H100 needs at each precision and what an 8-GPU node needs.
`--ablation`: what limits the JPEG pipeline (it without the shuffle buffer, the skip counters, the random window
and flip, or with the host normalisation). `--threads-ablation`: TF's shared pool against private pools.

The runs alternate (round after round, each core count times every row once) so that noise from other work on
the machine hits them alike; each run is timed for `--seconds` after a warm-up; medians and their spread (min-max)
are reported. Results go to docs/results/pipeline.json (bench.results); the exit code is 1 when a target is not met.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from collections.abc import Callable

from bench import pipeline_report as report
from bench.common import Measurement, records_of, synthetic_set, table_with_limits
from bench.pipeline_names import ABLATION, BATCH, JPEG_LIMIT, LIMIT_OF, MAIN, NORMALISE, PARALLEL_JPEG, STAGES, THREADS
from bench.pipeline_worker import Plan, Worker
from bench.results import save

SHARDS = 8
SHOWN_INPUT = 12  # characters of a refused value echoed back


def positive(kind: type) -> Callable[[str], float]:
    """An argparse type: a number above 0, or a message naming what was given."""

    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a positive {kind.__name__}; got {text[:SHOWN_INPUT]!r}") \
                from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"expected a positive {kind.__name__}; got {text[:SHOWN_INPUT]!r}")
        return value

    return parse


def core_counts(text: str, available: int) -> list[int]:
    """'1,2' -> [1, 2]; ValueError naming --cores and what is allowed (1 to the cores this process may use)."""
    allowed = f"allowed: comma-separated counts from 1 to {available} (the cores this process may use), e.g. 1,2"
    counts = []
    for part in text.split(","):
        part = part.strip()
        if not part.isdigit():
            raise ValueError(f"--cores: {part[:SHOWN_INPUT]!r} is not a count of cores; {allowed}")
        count = int(part)
        if not 1 <= count <= available:
            raise ValueError(f"--cores: {count} is not between 1 and {available}; {allowed}")
        if count in counts:
            raise ValueError(f"--cores: {count} is given twice; {allowed}")
        counts.append(count)
    return counts


def parse_args(argv: list[str] | None = None, available: int | None = None) -> argparse.Namespace:
    """The options; `available`: the cores this process may use (os.sched_getaffinity), which bound --cores."""
    available = available or len(os.sched_getaffinity(0))
    parser = argparse.ArgumentParser(prog="python -m bench.pipeline", description=__doc__.splitlines()[0])
    parser.add_argument("--cores", default=str(available),
                        help=f"comma-separated core counts, each measured pinned to that many cores (default: "
                             f"{available}, all this process may use)")
    parser.add_argument("--images", type=positive(int), default=256, help="synthetic images in the data set")
    parser.add_argument("--size", type=positive(int), default=1024, help="original image size (ChestX-ray14: 1024)")
    parser.add_argument("--batch-size", type=positive(int), default=32)
    parser.add_argument("--image-size", type=positive(int), default=224, help="what the model is fed")
    parser.add_argument("--short-side", type=positive(int), default=256, help="short side of the JPEG records")
    parser.add_argument("--quality", type=positive(int), default=95, help="JPEG quality of the records")
    parser.add_argument("--repeats", type=positive(int), default=5, help="alternating rounds")
    parser.add_argument("--seconds", type=positive(float), default=2.0, help="timed seconds per run (after warm-up)")
    parser.add_argument("--threads", type=positive(int), default=None,
                        help="private tf.data thread pool (default: TF's shared pool)")
    parser.add_argument("--ablation", action="store_true", help="also: what limits the JPEG pipeline")
    parser.add_argument("--threads-ablation", action="store_true", help="also: shared vs private thread pools")
    args = parser.parse_args(argv)
    try:
        args.cores = core_counts(args.cores, available)
    except ValueError as error:
        parser.error(str(error))
    return args


def command(args: argparse.Namespace) -> str:
    """The command line that reproduces this run, every option spelled out."""
    optional = ([] if args.threads is None else [f"--threads {args.threads}"]) + \
        (["--ablation"] if args.ablation else []) + (["--threads-ablation"] if args.threads_ablation else [])
    return " ".join(["python -m bench.pipeline", f"--cores {','.join(map(str, args.cores))}",
                     f"--images {args.images}", f"--size {args.size}", f"--batch-size {args.batch_size}",
                     f"--image-size {args.image_size}", f"--short-side {args.short_side}", f"--quality {args.quality}",
                     f"--repeats {args.repeats}", f"--seconds {args.seconds:g}", *optional])


def row_names(args: argparse.Namespace) -> list[str]:
    """Every row of one round, in the order it runs: main, breakdown stages, then the opt-in ablations."""
    names = [*MAIN, *STAGES]
    names += list(ABLATION) if args.ablation else []
    names += list(THREADS) if args.threads_ablation else []
    return names


def measure(args: argparse.Namespace, plan: Plan) -> tuple[report.Samples, report.Samples, dict[int, dict]]:
    """All rows at all core counts, alternating: in each round every worker times every row once. Returns images/s
    and CPU us per image, by core count and row, and what each worker said about itself."""
    names = row_names(args)
    rates: report.Samples = {cores: {name: [] for name in names} for cores in args.cores}
    used: report.Samples = {cores: {name: [] for name in names} for cores in args.cores}
    workers: list[Worker] = []
    try:
        for cores in args.cores:
            workers.append(Worker(cores, plan))
        for round_ in range(args.repeats):
            for worker in workers:
                for name, (rate, cpu_us) in worker.rates(names).items():
                    rates[worker.cores][name].append(rate)
                    used[worker.cores][name].append(cpu_us)
            print(f"round {round_ + 1} of {args.repeats} done", file=sys.stderr)
    finally:
        for worker in workers:
            worker.stop()
    return rates, used, {worker.cores: worker.info for worker in workers}


def rows_data(samples: report.Samples, used: report.Samples) -> dict:
    """Every row at every core count: images/s samples, median, spread, per core, and CPU us per image."""
    return {str(cores): {name: {**Measurement(name, tuple(values)).as_row(),
                                "per_core": statistics.median(values) / cores,
                                "cpu_us_per_image": statistics.median(used[cores][name])}
                         for name, values in by_name.items()}
            for cores, by_name in samples.items()}


def main_rows(samples: report.Samples, cores: int) -> list[dict]:
    """The main table at `cores`, as the chart reads it (docs/benchmarks_chart.py: data["rows"])."""
    rows = {m.name: m for m in report.measurements(samples, cores, MAIN)}
    return [{**row.as_row(), "limit": LIMIT_OF.get(row.name, row.name),
             "ratio": row.median / rows[LIMIT_OF.get(row.name, row.name)].median} for row in rows.values()]


def print_report(args: argparse.Namespace, samples: report.Samples, used: report.Samples,
                 info: dict[int, dict]) -> dict:
    """Print every table; return them as data for the JSON."""
    shown = report.target_cores(args.cores)
    data: dict = {"cores": shown, "rows": main_rows(samples, shown), "by_cores": rows_data(samples, used),
                  "workers": {str(c): i for c, i in info.items()}, "breakdown": {}, "ablation": {}, "threads": {}}
    for cores in args.cores:
        print(table_with_limits(
            f"Input pipeline, {args.size}x{args.size} greyscale PNG -> {args.image_size}, batch {args.batch_size}, "
            f"{args.repeats} alternating runs of {args.seconds:g} s, {cores} cores (CPUs {info[cores]['cpus']}); "
            f"JPEG records: short side {args.short_side}, quality {args.quality}; `parallel` delivers "
            f"{info[cores]['delivers']}", report.measurements(samples, cores, MAIN), LIMIT_OF) + "\n")
    print(report.per_core_table(samples, MAIN) + "\n")
    for cores in args.cores:
        costs = report.breakdown(report.measurements(samples, cores, STAGES),
                                 [statistics.median(used[cores][name]) for name in STAGES], cores)
        print(report.breakdown_table(costs, cores) + "\n")
        data["breakdown"][str(cores)] = [vars(c) for c in costs]
        print_ablations(args, samples, cores, data)
    data["cores_per_gpu"] = print_cores_per_gpu(samples, max(args.cores))
    return data


def print_ablations(args: argparse.Namespace, samples: report.Samples, cores: int, data: dict) -> None:
    """The opt-in tables at `cores`: what limits the JPEG pipeline (against the uint8 pipeline built from its
    parts, `BATCH`), and the thread pools (against TF's shared pool); both beside the decode limit."""
    if args.ablation:
        rows = report.measurements(samples, cores, [PARALLEL_JPEG, JPEG_LIMIT, BATCH, *ABLATION, NORMALISE])
        print(report.ablation_table(f"What limits the JPEG pipeline, {cores} cores", rows, rows[1], rows[2]) + "\n")
        data["ablation"][str(cores)] = report.ablation_rows(rows, rows[1], rows[2])
    if args.threads_ablation:
        rows = report.measurements(samples, cores, [*THREADS, JPEG_LIMIT])
        print(report.ablation_table(f"Thread pools, `parallel` on JPEG records, {cores} cores", rows, rows[-1], rows[0])
              + "\n")
        data["threads"][str(cores)] = report.ablation_rows(rows, rows[-1], rows[0])


def print_cores_per_gpu(samples: report.Samples, cores: int) -> dict:
    """Cores per H100 from the JPEG pipeline's images/s per core at `cores` (the most measured: the most shared)."""
    per_core = report.median_of(samples, cores, PARALLEL_JPEG) / cores
    needs = report.cores_needed(per_core, report.gpu_rates())
    print(report.cores_needed_table(needs, per_core, PARALLEL_JPEG, cores) + "\n")
    return {"row": PARALLEL_JPEG, "measured_on_cores": cores, "images_per_sec_per_core": per_core,
            "gpus_per_node": report.NODE_GPUS, "source": report.H100_SOURCE, "needs": [vars(n) for n in needs]}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    original = synthetic_set(args.images, args.size)
    from chexnet.data.tfrecords import JPEG, Storage  # TensorFlow: only once the options are known to be good

    plan = Plan(records_of(original, SHARDS), records_of(original, SHARDS, Storage.of(JPEG, args.short_side,
                                                                                       args.quality)),
                args.batch_size, args.image_size, args.threads, args.seconds)
    samples, used, info = measure(args, plan)
    data = print_report(args, samples, used, info)
    found = report.targets(samples, PARALLEL_JPEG, JPEG_LIMIT)
    print("\n".join(report.verdict(found)))
    print(f"command: {command(args)}")
    path = save("pipeline", command=command(args), targets=found, data=data)
    print(f"results: {path}")
    return 0 if all(t.met for t in found) else 1


if __name__ == "__main__":
    raise SystemExit(main())
