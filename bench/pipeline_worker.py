"""One measuring process per core count for bench.pipeline: pinned to that many cores before TensorFlow starts.

TensorFlow sizes its thread pools once, when it starts, from the cores the process may run on: a count of cores
therefore needs a process of its own. Each worker is pinned with os.sched_setaffinity to the first `cores` of the
cores the benchmark may use, then sets TensorFlow's inter- and intra-op pools to `cores` threads. tf.data runs on
the inter-op pool (its "shared pool") unless `--threads` gives the pipeline a private one; the threads ablation
compares the two. Workers stay up for the whole run, so that the parent can alternate core counts and rows: round
after round, each worker times every row once.
"""

from __future__ import annotations

import multiprocessing
import os
import traceback
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path


@dataclass(frozen=True)
class Plan:
    """What a worker builds: the data and the training settings of the rows it times."""

    png_dir: Path
    jpeg_dir: Path
    batch_size: int
    image_size: int
    threads: int | None
    seconds: float


def pinned_cpus(cores: int) -> set[int]:
    """The first `cores` of the CPUs this process may use (its affinity mask, not the machine's count)."""
    return set(sorted(os.sched_getaffinity(0))[:cores])


def _serve(conn: Connection, cores: int, plan: Plan) -> None:
    """The worker: pin, start TensorFlow with `cores` threads, build the rows, then time the rows it is sent."""
    try:
        os.sched_setaffinity(0, pinned_cpus(cores))
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")  # no INFO lines ("Filling up shuffle buffer") in tables
        import tensorflow as tf

        tf.config.threading.set_inter_op_parallelism_threads(cores)
        tf.config.threading.set_intra_op_parallelism_threads(cores)
        from bench.pipeline_names import PARALLEL_JPEG
        from bench.pipeline_rows import builders, delivered_dtype, images_per_sec
        from chexnet.data.datasets import PipelineConfig

        cfg = PipelineConfig("parallel", plan.batch_size, plan.image_size, threads=plan.threads)
        rows = builders(plan.png_dir, plan.jpeg_dir, cfg)
        delivers = delivered_dtype(rows[PARALLEL_JPEG]())
        conn.send(("ready", {"cpus": sorted(os.sched_getaffinity(0)), "delivers": delivers}))
        while (names := conn.recv()) is not None:
            conn.send(("rates", {name: images_per_sec(rows[name](), plan.seconds, plan.batch_size) for name in names}))
    except Exception:  # noqa: BLE001 - anything that stops a worker goes back to the parent, which stops the run
        conn.send(("error", traceback.format_exc()))


class Worker:
    """The parent's handle on one measuring process."""

    def __init__(self, cores: int, plan: Plan) -> None:
        self.cores = cores
        context = multiprocessing.get_context("spawn")  # a fresh interpreter: no TensorFlow state is inherited
        self._conn, child = context.Pipe()
        self._process = context.Process(target=_serve, args=(child, cores, plan), name=f"bench-pipeline-{cores}")
        self._process.start()
        child.close()
        self.info = self._receive("ready")

    def rates(self, names: list[str]) -> dict[str, tuple[float, float]]:
        """Time each named row once, in order: (images/s, CPU us per image) by name."""
        self._conn.send(names)
        return self._receive("rates")

    def _receive(self, expected: str) -> dict:
        try:
            kind, value = self._conn.recv()
        except EOFError:
            raise RuntimeError(f"the {self.cores}-core measuring process ended "
                               f"(exit code {self._process.exitcode})") from None
        if kind != expected:
            raise RuntimeError(f"the {self.cores}-core measuring process failed:\n{value}")
        return value

    def stop(self) -> None:
        if self._process.is_alive():
            try:
                self._conn.send(None)
            except OSError:
                pass  # the worker has gone already: nothing to tell it
        self._process.join(timeout=30)
        if self._process.is_alive():
            self._process.kill()
            self._process.join()
