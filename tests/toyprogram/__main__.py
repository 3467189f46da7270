"""`python -m tests.toyprogram`: the toy program (tests.toyprogram.train) with TensorBoard on its own stub of
TensorFlow, as the portal reads event files (portal.metrics.without_tensorflow): the portal's venv, which the toy
runs in, has TensorFlow, whose import would load a framework the toy does not use and write ~/.keras into the
user's home."""

import sys
import types

sys.modules.setdefault("tensorboard.compat.notf", types.ModuleType("tensorboard.compat.notf"))

from .train import main  # noqa: E402 - after the stub, which TensorBoard reads on import

sys.exit(main())
