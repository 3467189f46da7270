"""What the training programs' tests share: where the PyTorch program's interpreter is."""

from __future__ import annotations

import sys
from pathlib import Path

from portal.records.programs import registry


def torch_python() -> Path:
    """The PyTorch program's interpreter, where the job scripts find it (beside the portal's venv)."""
    python = Path(registry().get("chexnet-torch").python(Path(sys.prefix)))
    assert python.exists(), f"{python} is missing: `make install` (deploy/local/install-torch.sh) builds it"
    return python
