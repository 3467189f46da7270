"""What chexnet.train says: one line on stderr per message, after its prefix (no TensorFlow here)."""

from __future__ import annotations

import sys

LOG_PREFIX = "chexnet.train:"


def say(message: str) -> None:
    """One line on stderr, flushed at once so that horovodrun's interleaved output keeps it whole."""
    print(f"{LOG_PREFIX} {message}", file=sys.stderr, flush=True)
