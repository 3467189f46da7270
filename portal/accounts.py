"""`python -m portal.accounts sync [--dry-run] | show`: the admin's command for the directory's groups as Slurm
accounts and associations. The logic is Slurm's (portal.scheduler.slurm.accounts); this is its entry point."""

import sys

from portal.scheduler.slurm.accounts import main

if __name__ == "__main__":
    sys.exit(main())
