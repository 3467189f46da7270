"""The toy program's declaration (portal.records.programs says what each name means): plain values, no import of
the portal."""

NAME = "toy-linear"
TITLE = "Toy: a linear read-out in NumPy"
DESCRIPTION = "each image's 4x4 cell brightnesses, a logistic read-out per pathology, Adam; no framework"
MODULE = "."  # this package: tests.toyprogram, or toyprogram in the test boxes' site directory
LAUNCHER = "toyrun"  # the toy launcher beside it (launcher.py); it trains on rank 0's process alone
VENV = ""  # the portal's own
FIELDS = (
    {"name": "model", "kind": "choice", "choices": ("tinycnn",), "default": "tinycnn", "label": "Model",
     "help": "the toy has one model, named as the tests' tiny model is"},
    {"name": "grid", "kind": "int", "low": 2, "high": 8, "default": 4, "label": "Grid",
     "help": "cells per side whose mean brightness the read-out weighs"},
)
ARGS_TEMPLATE = "args.sh"
