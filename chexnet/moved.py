"""The names chexnet's modules had before the program kit (issue 64), kept for notebooks a user copied before: each
old module is the kit's, with a FutureWarning naming where it is now. Only the ones the template notebooks
imported (03-evaluate, 04-scaling-study); nothing of the portal uses them."""

from __future__ import annotations

import importlib
import warnings
from types import ModuleType


def moved(old: str, new: str) -> ModuleType:
    """The kit's module `new`, said once where `old` is imported from."""
    warnings.warn(f"{old} is now {new} (the program kit); import it from there: {old} will go", FutureWarning,
                  stacklevel=3)
    return importlib.import_module(new)
