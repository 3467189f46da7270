"""What the training programs' tests share: where each registered program's interpreter is."""

from __future__ import annotations

import sys
from pathlib import Path

from portal.records.programs import Program, registry


def program_python(program: Program) -> Path:
    """The program's interpreter, where the job scripts find it (its venv, beside the portal's, or the portal's)."""
    python = Path(program.python(Path(sys.prefix)))
    assert python.exists(), (f"{python} is missing: `make install` builds each program's venv "
                             "(deploy/local/install-torch.sh the PyTorch program's)")
    return python


def torch_python() -> Path:
    """The PyTorch program's interpreter."""
    return program_python(registry().get("chexnet-torch"))
