"""Moved to programkit.model_card (issue 64): kept for notebooks copied before (chexnet.moved)."""

import sys

from chexnet.moved import moved

sys.modules[__name__] = moved(__name__, "programkit.model_card")
