"""`python -m portal.jobs render --scheduler slurm|local|kubernetes [--template chexnet] [--nodes N] ...`

Prints what would be submitted (the batch script, or the MPIJob manifest) without submitting it. Every JobSpec
field is a flag; a bad value is one line naming the field and what is allowed, exit status 2.
"""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn

from portal.config import ConfigError
from portal.errors import Refused
from portal.jobs import SCHEDULERS, JobAccessError, SchedulerError, UnknownScheduler, render
from portal.records.spec import JobSpecError, boolean_fields, input_fields
from portal.renamed import BACKEND_GOES

EXIT_USAGE = 2
PROG = "python -m portal.jobs"


class UsageError(Refused):
    pass


class _OneLineParser(argparse.ArgumentParser):
    """argparse prints the whole usage block on an error; one line that names the flag is enough."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def parser() -> argparse.ArgumentParser:
    p = _OneLineParser(prog=PROG, description="Training jobs of the Data Scientist Portal.")
    commands = p.add_subparsers(dest="command", required=True)
    r = commands.add_parser("render", help="print the script a job would run, without submitting it")
    r.add_argument("--scheduler", help=f"one of {', '.join(SCHEDULERS)} (default: the `scheduler` setting)")
    r.add_argument("--backend", dest="old_scheduler", help=argparse.SUPPRESS)  # --scheduler's old name
    r.add_argument("--user", help="render for this user (root only); default: you")
    r.add_argument("--groups", help="the user's groups, comma-separated (their GPU quota); default: their Unix "
                   "groups, or DSPORTAL_GROUPS on Kubernetes")
    switches = boolean_fields()
    for name in input_fields():  # every program's own fields too (--amp ...: chexnet-torch's)
        if name in switches:  # --fp16 alone means true; --fp16 false is allowed too
            r.add_argument(f"--{name.replace('_', '-')}", dest=name, nargs="?", const="true", metavar="true|false")
        else:
            r.add_argument(f"--{name.replace('_', '-')}", dest=name, metavar=name.upper())
    return p


def main(argv: list[str] | None = None) -> int:
    try:
        args = parser().parse_args(argv)
    except UsageError as err:
        print(f"{PROG}: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    spec = {name: getattr(args, name) for name in input_fields() if getattr(args, name) is not None}
    if args.old_scheduler is not None:
        print(f"{PROG}: warning: --backend is deprecated and goes after {BACKEND_GOES}: use --scheduler",
              file=sys.stderr)
        args.scheduler = args.scheduler or args.old_scheduler
    try:
        groups = None if args.groups is None else [g for g in args.groups.split(",") if g]
        print(render(spec, scheduler=args.scheduler, user=args.user, groups=groups), end="")
    except (JobSpecError, UnknownScheduler, JobAccessError, ConfigError) as err:
        print(f"{PROG}: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    except SchedulerError as err:
        print(f"{PROG}: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
