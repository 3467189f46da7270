"""A node's GPU reader, run by root on the node: every `--every` seconds it reads the node's GPUs (NVML, or the
boxes' stand-in for their FAKE GPUs) with their holders as the scheduler says (`gpu_holders`: Slurm's queue; on
Kubernetes the pods on the node, with their uids), and writes the reading for the portal: `<out>/<node>.json` (the
latest, replaced whole) and `<out>/<node>.jsonl` (every reading, the last MAX_HISTORY_BYTES of them). The directory
is root's alone (0700): a user's process can neither write a reading nor read another user's.

    python -m portal.gpus.agent --node tnode1 --out /var/lib/dsportal/gpus [--reader standin --gpus 2]

Each reading's line in the log says what changed: holders come and go, and a reader that fails says why once.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from portal.errors import SchedulerError
from portal.gpus import cgroups, nvml
from portal.gpus.files import append_lines, replace_text
from portal.gpus.readings import NodeReading
from portal.gpus.standin import Held, StandIn
from portal.inputs import one_line

MAX_HISTORY_BYTES = 4 << 20  # about a day of a 4-GPU node's readings every 15 s
EVERY_S = 15.0
log = logging.getLogger("dsportal.gpus")


def write(out: Path, reading: NodeReading) -> None:
    """The latest reading in place of the last (rename: a reader never sees half of one), and appended to the
    history, which keeps its newer half when it grows past MAX_HISTORY_BYTES."""
    text = json.dumps(reading.to_dict(), separators=(",", ":")) + "\n"
    replace_text(out / f"{reading.node}.json", text)
    append_lines(out / f"{reading.node}.jsonl", [text], MAX_HISTORY_BYTES)


class Agent:
    def __init__(self, node: str, out: Path, holders: Callable[[str], Mapping[str, Held]],
                 read: Callable[[Mapping[str, Held]], NodeReading], source: str):
        self.node, self.out, self.holders, self.read, self.source = node, out, holders, read, source
        self._holders: set[str] = set()
        self._error = ""

    def once(self) -> NodeReading:
        try:
            held = self.holders(self.node)
        except SchedulerError as err:  # every GPU unknown until the scheduler answers again
            reading = NodeReading(self.node, time.time(), 0.0, self.source,
                                  error=f"the scheduler did not say who holds the GPUs: {one_line(err, 200)}")
        else:
            reading = self.read(held)
        write(self.out, reading)
        self._say(reading)
        return reading

    def _say(self, reading: NodeReading) -> None:
        holders = {gpu.holder for gpu in reading.gpus if gpu.holder}
        if reading.error and reading.error != self._error:
            log.warning("%s: %s", self.node, reading.error)
        elif self._error and not reading.error:
            log.info("%s: reads again", self.node)
        for holder in sorted(holders - self._holders):
            log.info("%s: %s now holds GPU(s) %s", self.node, holder,
                     ",".join(str(gpu.index) for gpu in reading.held_by(holder)))
        for holder in sorted(self._holders - holders):
            log.info("%s: %s holds no GPU any more", self.node, holder)
        self._holders, self._error = holders, reading.error


def readers(args: argparse.Namespace) -> Callable[[Mapping[str, Held]], NodeReading]:
    if args.reader == "standin":
        standin = StandIn(args.node, args.gpus,
                          lambda holder, held: cgroups.use_of(cgroups.holder_dirs(args.node, holder, held.pods)))
        return standin.read
    module = nvml.load()
    return lambda held: nvml.read(module, args.node, _by_index(held), args.every)


def _by_index(held: Mapping[str, Held]) -> dict[int, nvml.Holding]:
    """NVML's GPUs by index, given to holders in order: which index Slurm gave whom comes with its GRES detail
    (a later step); until then a node with one holder, the common case, is exact."""
    by_index: dict[int, nvml.Holding] = {}
    for holder in sorted(held):
        for _ in range(held[holder].gpus):
            by_index[len(by_index)] = nvml.Holding(holder, held[holder].user)
    return by_index


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m portal.gpus.agent", description=__doc__.split("\n\n")[0])
    parser.add_argument("--node", required=True, help="this node's name, as the scheduler knows it")
    parser.add_argument("--out", required=True, type=Path, help="where the readings go (made 0700, root's)")
    parser.add_argument("--reader", choices=("nvml", "standin"), default="nvml",
                        help="nvml where the GPUs are real; standin for the boxes' FAKE GPUs (default: %(default)s)")
    parser.add_argument("--gpus", type=int, default=0, help="the stand-in's GPUs on this node")
    parser.add_argument("--every", type=float, default=EVERY_S, help="seconds between readings (default: %(default)s)")
    parser.add_argument("--once", action="store_true", help="one reading, then exit")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    args.out.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(args.out, 0o700)
    from portal.config import load
    from portal.scheduler.registry import scheduler_for

    scheduler = scheduler_for(load())
    agent = Agent(args.node, args.out, scheduler.gpu_holders, readers(args), args.reader)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    log.info("%s: reading its GPUs every %.0f s with %s into %s", args.node, args.every, args.reader, args.out)
    while True:
        agent.once()
        if args.once or stop.wait(args.every):
            return 0


if __name__ == "__main__":
    raise SystemExit(main())
