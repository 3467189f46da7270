"""`python -m programkit.sweep_cli` (what job scripts run; job scripts written before run it as `python -m
chexnet.sweep_cli` or `python -m chexnet.sweep`): the command line of a sweep's study (programkit.sweep) and, on
Kubernetes, of its pods' claims (programkit.sweepclaims). Each prints one line, or JSON for `status`, and exits 2 with
one line on stderr for anything it cannot use: the files are the user's.

    claim JOB_DIR HOLDER TRIALS   the task this pod runs (waits while every unfinished task is held)
    attach JOB_DIR TASK           the task's trial number (writes trial-<task>.json); EXIT_FINISHED when it ended
    fail JOB_DIR TASK             the task's trial failed
    close JOB_DIR                 marks every unfinished trial FAIL
    status JOB_DIR [TASK]         the trials, as JSON
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from programkit.sweep import EXIT_FINISHED, SweepError, attach, close, fail, status, write_trial_file
from programkit.sweepclaims import CLAIM_WAIT_S, STALE_CLAIM_S, claim, valid_holder


def _number(text: str) -> bool:
    return text.isascii() and text.isdigit() and len(text) <= 6


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    usage = ("usage: python -m programkit.sweep_cli {claim JOB_DIR HOLDER TRIALS | attach JOB_DIR TASK | "
             "fail JOB_DIR TASK | close JOB_DIR | status JOB_DIR [TASK]}")
    commands = {"claim": (3,), "attach": (2,), "fail": (2,), "close": (1,), "status": (1, 2)}
    if not args or args[0] not in commands or len(args) - 1 not in commands[args[0]] or not all(
            _number(arg) for arg in ([args[3]] if args[0] == "claim" else args[2:3])) or (
            args[0] == "claim" and not valid_holder(args[2])):
        print(usage, file=sys.stderr)
        return 2
    job_dir = Path(args[1])
    try:
        if args[0] == "claim":
            waited = 0.0
            while True:
                task, held = claim(job_dir, args[2], int(args[3]))
                if task is not None:
                    print(task)
                    return 0
                if not held:
                    print("programkit.sweep: every trial has finished: nothing left to run", file=sys.stderr)
                    return EXIT_FINISHED
                if waited % 60 == 0:
                    print("programkit.sweep: every unfinished task is held by a running pod; waiting for one whose "
                          f"pod was lost ({STALE_CLAIM_S:.0f} s without a heartbeat)", file=sys.stderr)
                time.sleep(CLAIM_WAIT_S)
                waited += CLAIM_WAIT_S
        elif args[0] == "attach":
            task = int(args[2])
            number, params, finished = attach(job_dir, task)
            if finished:
                print(f"programkit.sweep: trial {number} of task {task} has already finished", file=sys.stderr)
                return EXIT_FINISHED
            write_trial_file(job_dir, task, number, params)
            print(number)
        elif args[0] == "fail":
            fail(job_dir, int(args[2]))
        elif args[0] == "close":
            print(f"programkit.sweep: {close(job_dir)} unfinished trial(s) marked FAIL", file=sys.stderr)
        else:
            print(json.dumps(status(job_dir, int(args[2]) if len(args) == 3 else None)))
    except (SweepError, OSError, ValueError, KeyError, TypeError) as err:  # the files are the user's: any content
        print(f"programkit.sweep: error: {type(err).__name__}: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
