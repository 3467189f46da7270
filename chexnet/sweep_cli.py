"""`python -m chexnet.sweep_cli`: the sweep's command line (programkit.sweep_cli), for the job scripts written
before they ran `python -m programkit.sweep_cli` (a sweep still queued, or a Kubernetes sweep whose Job makes its
pods from a template written then, through an upgrade)."""

import sys

from programkit.sweep_cli import main

if __name__ == "__main__":
    sys.exit(main())
