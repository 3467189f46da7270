"""Moved to programkit.metrics (issue 64): kept for notebooks copied before (chexnet.moved)."""

import sys

from chexnet.moved import moved

sys.modules[__name__] = moved(__name__, "programkit.metrics")
