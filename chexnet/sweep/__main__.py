"""`python -m chexnet.sweep`: the command line of chexnet.sweep_cli, for the job scripts written before they ran
that module directly (a sweep still queued through an upgrade). As this package's `__main__` it loads
chexnet.sweep once, where a module's `if __name__ == "__main__"` block loaded it twice."""

import sys

from chexnet.sweep_cli import main

sys.exit(main())
