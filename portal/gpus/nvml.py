"""The GPU reader where the GPUs are real: NVML, through nvidia-ml-py (`import pynvml`).

Per GPU: its UUID, its utilization (the percent of the driver's last sample period in which a kernel ran) and its
memory. Which job holds a GPU is the scheduler's to say, not NVML's (an idle notebook's GPU runs no process), so
the holders come in (`held`: index -> Holding). A call that fails for one GPU makes that GPU unknown; a failed
start of NVML (no driver, no device) makes the node's reading an error: unknown, never idle.

The suites replay recorded answers through the same calls (tests/unit/portal/gpus/). On a machine with GPUs,

    python -m portal.gpus.nvml                 # this node's reading, as JSON
    python -m portal.gpus.nvml --record        # NVML's answers in the replay's format, for the suites
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from portal.gpus.readings import GpuReading, NodeReading

MIB = 1 << 20


@dataclass(frozen=True)
class Holding:
    holder: str  # the scheduler's id of the job or server
    user: str


def load() -> ModuleType:
    import pynvml  # nvidia-ml-py: only where the GPUs are real

    return pynvml


def read(nvml: Any, node: str, held: Mapping[int, Holding], interval_s: float = 1.0) -> NodeReading:
    """This node's GPUs through `nvml` (pynvml, or a replay of its answers)."""
    at = time.time()
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as err:
        return NodeReading(node, at, interval_s, "nvml", error=f"NVML did not start: {_said(err)}")
    try:
        count = nvml.nvmlDeviceGetCount()
        gpus = tuple(_gpu(nvml, index, held.get(index)) for index in range(count))
    except nvml.NVMLError as err:
        return NodeReading(node, at, interval_s, "nvml", error=f"NVML could not count the GPUs: {_said(err)}")
    finally:
        _shut(nvml)
    return NodeReading(node, at, interval_s, "nvml", gpus=gpus)


def _shut(nvml: Any) -> None:
    try:
        nvml.nvmlShutdown()
    except nvml.NVMLError:  # what was read stands; the next read starts NVML again
        pass


def _gpu(nvml: Any, index: int, holding: Holding | None) -> GpuReading:
    who = {"holder": holding.holder, "user": holding.user} if holding else {}
    try:
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        uuid = nvml.nvmlDeviceGetUUID(handle)
        uuid = uuid.decode() if isinstance(uuid, bytes) else str(uuid)  # bytes before nvidia-ml-py 11.515
        busy = float(nvml.nvmlDeviceGetUtilizationRates(handle).gpu)
        memory = nvml.nvmlDeviceGetMemoryInfo(handle)
    except nvml.NVMLError:  # a lost or resetting GPU: unknown, and the others are still read
        return GpuReading(index=index, **who)
    return GpuReading(index=index, uuid=uuid, busy=min(100.0, max(0.0, busy)),
                      memory_used_mib=int(memory.used) // MIB, memory_total_mib=int(memory.total) // MIB, **who)


def _said(err: Exception) -> str:
    return str(err)[:200] or type(err).__name__


def record(nvml: Any) -> dict[str, Any]:
    """NVML's answers to the calls `read` makes, in the replay's format (tests/unit/portal/gpus/nvml_replay.py;
    the answers are in tests/unit/data/nvml/)."""
    nvml.nvmlInit()
    try:
        devices = []
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            uuid = nvml.nvmlDeviceGetUUID(handle)
            rates = nvml.nvmlDeviceGetUtilizationRates(handle)
            memory = nvml.nvmlDeviceGetMemoryInfo(handle)
            devices.append({"uuid": uuid.decode() if isinstance(uuid, bytes) else uuid,
                            "utilization": {"gpu": rates.gpu, "memory": rates.memory},
                            "memory": {"total": memory.total, "used": memory.used, "free": memory.free},
                            "name": str(nvml.nvmlDeviceGetName(handle))})
        return {"driver": str(nvml.nvmlSystemGetDriverVersion()), "devices": devices}
    finally:
        _shut(nvml)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m portal.gpus.nvml", description=__doc__.split("\n\n")[0])
    parser.add_argument("--record", action="store_true", help="print NVML's answers in the suites' replay format")
    parser.add_argument("--node", default="this-node", help="the node's name in the reading (default: %(default)s)")
    args = parser.parse_args(argv)
    nvml = load()
    answer = record(nvml) if args.record else read(nvml, args.node, {}).to_dict()
    print(json.dumps(answer, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
