"""`python -m chexnet.sweep`: the sweep's command line (programkit.sweep_cli), for the job scripts written before
they ran `python -m programkit.sweep_cli` (a sweep still queued through an upgrade)."""

import sys

from programkit.sweep_cli import main

sys.exit(main())
