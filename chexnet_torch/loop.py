"""The pieces of the PyTorch training loop that are not the loop: the precision and memory layout (autocast and
channels-last on a GPU), CheXNet's class-weighted binary cross-entropy, and the checkpoints with exact resume."""

from __future__ import annotations

import contextlib
import os
import random
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from programkit.labels import NUM_CLASSES

MIN_FREQUENCY = 1e-3  # chexnet.model.MIN_FREQUENCY: a class with no positives keeps a finite weight
KEEP_CHECKPOINTS = 3
CHECKPOINT = re.compile(r"^ckpt-([0-9]{1,7})\.pt$")


def class_weights(train_labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-class (positive, negative) weights, as chexnet.model.class_weights: w+ = |N| / n, w- = |P| / n."""
    labels = np.asarray(train_labels, dtype=np.float64)
    if labels.ndim != 2 or labels.shape[1] != NUM_CLASSES or labels.shape[0] == 0:
        raise ValueError(f"train_labels must have shape (n >= 1, {NUM_CLASSES}); got {labels.shape}")
    positive = np.clip(labels.mean(axis=0), MIN_FREQUENCY, 1.0 - MIN_FREQUENCY)
    return (1.0 - positive).astype(np.float32), positive.astype(np.float32)


def weighted_bce(w_pos: torch.Tensor, w_neg: torch.Tensor):
    """CheXNet's loss on logits: per class -(w+ y log p + w- (1 - y) log(1 - p)), the mean over classes and
    examples; log p as logsigmoid, which stays finite where p rounds to 0 or 1 (a NaN stays NaN)."""
    def loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        logits, labels = logits.float(), labels.float()
        per_class = -(w_pos * labels * nn.functional.logsigmoid(logits)
                      + w_neg * (1.0 - labels) * nn.functional.logsigmoid(-logits))
        return per_class.mean()
    return loss


@dataclass(frozen=True)
class Precision:
    """What the GPU computes in: autocast's dtype (None: float32) and the memory layout; on CPUs, float32 and
    the default layout whatever was asked (autocast on CPUs is slower there, not faster)."""

    dtype: torch.dtype | None
    channels_last: bool
    device_type: str
    scaler: torch.amp.GradScaler | None = None

    @classmethod
    def choose(cls, amp: str, channels_last: str, device: torch.device) -> Precision:
        if device.type != "cuda":
            return cls(None, False, device.type)
        if amp == "auto":
            amp = "bf16" if torch.cuda.is_bf16_supported() else "off"
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(amp)
        scaler = torch.amp.GradScaler("cuda") if dtype == torch.float16 else None
        return cls(dtype, channels_last != "off", device.type, scaler)

    def words(self) -> str:
        kind = {torch.bfloat16: "bf16", torch.float16: "fp16"}.get(self.dtype, "float32")  # type: ignore[arg-type]
        return f"{kind}{', channels-last' if self.channels_last else ''}"

    def place(self, model: nn.Module, device: torch.device) -> nn.Module:
        model = model.to(device)
        return model.to(memory_format=torch.channels_last) if self.channels_last else model

    def inputs(self, images: torch.Tensor) -> torch.Tensor:
        return images.contiguous(memory_format=torch.channels_last) if self.channels_last else images

    def autocast(self):
        if self.dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device_type, dtype=self.dtype)

    def backward(self, loss: torch.Tensor, optimizer: torch.optim.Optimizer) -> None:
        if self.scaler is None:
            loss.backward()
            optimizer.step()
            return
        self.scaler.scale(loss).backward()
        self.scaler.step(optimizer)
        self.scaler.update()


class Checkpoints:
    """`ckpt-<epoch>.pt` in the checkpoint directory: written to a temporary name, fsynced, then renamed (a kill
    leaves the last whole one); the last KEEP_CHECKPOINTS kept. Rank 0 saves; every rank restores the same."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    @staticmethod
    def name(epoch: int) -> str:
        return f"ckpt-{epoch}.pt"

    def epochs(self) -> list[int]:
        if not self.directory.is_dir():
            return []
        return sorted(int(m.group(1)) for p in self.directory.iterdir() if (m := CHECKPOINT.match(p.name)))

    def latest_epoch(self) -> int:
        return max(self.epochs(), default=0)

    def latest(self) -> Path | None:
        epoch = self.latest_epoch()
        return self.directory / self.name(epoch) if epoch else None

    def save(self, state: dict, epoch: int, step: int) -> Path:
        self.directory.mkdir(parents=True, exist_ok=True)
        payload = {name: part.state_dict() for name, part in state.items()}
        payload.update(epoch=epoch, step=step, rng=rng_state())
        path = self.directory / self.name(epoch)
        partial = path.with_name(f".{path.name}.{os.getpid()}")
        with partial.open("wb") as out:
            torch.save(payload, out)
            out.flush()
            os.fsync(out.fileno())
        partial.replace(path)
        for old in self.epochs()[:-KEEP_CHECKPOINTS]:
            (self.directory / self.name(old)).unlink(missing_ok=True)
        return path

    def restore(self, state: dict, device: torch.device) -> tuple[int, int]:
        """(epochs done, global step) after loading the latest checkpoint into `state`; (0, 0) without one."""
        latest = self.latest()
        if latest is None:
            return 0, 0
        payload = torch.load(latest, map_location=device, weights_only=False)
        for name, part in state.items():
            part.load_state_dict(payload[name])
        set_rng_state(payload["rng"])
        return int(payload["epoch"]), int(payload["step"])


def rng_state() -> dict:
    return {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None}


def set_rng_state(saved: dict) -> None:
    torch.set_rng_state(saved["torch"])
    np.random.set_state(saved["numpy"])
    random.setstate(saved["python"])
    if saved.get("cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(saved["cuda"])
