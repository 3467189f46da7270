"""What the portal's command lines share: how an expected failure ends one.

    def main() -> int:
        return run_reporting("demo data", lambda: print(ensure_demo_data(load())), DemoDataError)
"""

from __future__ import annotations

import sys
from collections.abc import Callable


def run_reporting(prog: str, work: Callable[[], object], expected: type[Exception] | tuple[type[Exception], ...],
                  status: int = 1) -> int:
    """Run `work` and return the exit status: 0 when it ends, `status` when it raises an `expected` error.

    An expected error is the user's or the site's to fix (a bad setting, a daemon that is down), so it is one line on
    stderr, "<prog>: <message>", never a traceback; any other error is a bug, and keeps its traceback.
    """
    try:
        work()
    except expected as err:
        print(f"{prog}: {err}", file=sys.stderr)
        return status
    return 0
