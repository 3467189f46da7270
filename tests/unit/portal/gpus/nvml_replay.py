"""NVML's answers played back through pynvml's calls (the ones portal.gpus.nvml makes), from a JSON file in
tests/unit/data/nvml/: what `python -m portal.gpus.nvml --record` printed on a machine with GPUs, or written in its
format where the file's name says so. A device's "fail" names the calls that raise for it, as a lost GPU's do;
the file's "fail" those that raise for the whole node (nvmlInit, nvmlDeviceGetCount)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

ANSWERS = Path(__file__).resolve().parents[2] / "data" / "nvml"


class NVMLError(Exception):
    """pynvml's exception: its text is NVML's error string."""


class Replay:
    NVMLError = NVMLError

    def __init__(self, name: str, **changes: object):
        self.answers = {**json.loads((ANSWERS / name).read_text()), **changes}
        self.started = 0  # nvmlInit minus nvmlShutdown: every read must leave NVML as it found it

    def _fails(self, call: str, device: dict | None = None) -> None:
        said = (device or self.answers).get("fail", {}).get(call)
        if said:
            raise NVMLError(said)

    def nvmlInit(self) -> None:
        self._fails("nvmlInit")
        self.started += 1

    def nvmlShutdown(self) -> None:
        self.started -= 1

    def nvmlDeviceGetCount(self) -> int:
        self._fails("nvmlDeviceGetCount")
        return len(self.answers["devices"])

    def nvmlDeviceGetHandleByIndex(self, index: int) -> dict:
        device = self.answers["devices"][index]
        self._fails("nvmlDeviceGetHandleByIndex", device)
        return device

    def nvmlDeviceGetUUID(self, device: dict) -> str:
        self._fails("nvmlDeviceGetUUID", device)
        return device["uuid"]

    def nvmlDeviceGetName(self, device: dict) -> str:
        return device.get("name", "")

    def nvmlSystemGetDriverVersion(self) -> str:
        return self.answers.get("driver", "")

    def nvmlDeviceGetUtilizationRates(self, device: dict) -> SimpleNamespace:
        self._fails("nvmlDeviceGetUtilizationRates", device)
        return SimpleNamespace(**device["utilization"])

    def nvmlDeviceGetMemoryInfo(self, device: dict) -> SimpleNamespace:
        self._fails("nvmlDeviceGetMemoryInfo", device)
        return SimpleNamespace(**device["memory"])
