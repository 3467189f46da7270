"""The dashboard's GPU watch (docs/gpus.md, "Idle GPUs given back"): every gpu_read_every_s, a pass over
the running servers and jobs that hold GPUs, and what it decides carried out.

    WARN   a server whose GPUs were idle gpu_idle_s: mail to its user; the warning on the GPUs page (with "Keep
           it"), inside JupyterLab (its GPU notice asks the GPUs API) and by the portal's browser notification
    STOP   the server, gpu_idle_grace_s after the warning unless kept: the hub stops it (its user's files stay in
           their home: nothing they saved is lost); mail says why
    FLAG   a job whose GPUs were idle as long: its page says so, mail tells its user
    STOP   the flagged job, only where gpu_idle_stop_jobs is on: cancelled as its user, as their own cancel would
    CLEAR  a warning or flag whose GPUs work again

Users' groups come from the hub's roster (as every page's do); when the hub does not answer, nothing is decided
that pass. A holder whose node's reader failed is unknown, never idle (portal.gpus.idle). Every event is logged
and kept (portal.gpus.watch); a mail or a stop that fails is logged, and a stop is asked for again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from concurrent.futures import Executor
from email.message import EmailMessage
from email.utils import formatdate, make_msgid
from typing import TypeVar

from tornado.ioloop import PeriodicCallback

from portal.config import PortalConfig
from portal.gpus import readings_dir
from portal.gpus.idle import Act, Rule
from portal.gpus.ledger import Ledger
from portal.gpus.view import latest
from portal.gpus.watch import Event, Holder, Watch
from portal.jobmail import NoAddress, owner_address, send
from portal.records.states import RUNNING
from portal.scheduler.snapshot import ClusterSnapshot
from portal.service.board import JobBoard
from portal.service.hub import HubDirectory, HubUnavailable
from portal.service.hub_user import HubUser
from portal.service.prometheus import WATCH_EVENTS

T = TypeVar("T")
log = logging.getLogger("portal.service")
SUBJECTS = {
    Act.WARN.value: "Your JupyterLab server's GPUs are idle: it stops {deadline} unless you keep it",
    Act.STOP.value: "Your JupyterLab server was stopped: its GPUs were idle",
    Act.FLAG.value: "Your job {holder}'s GPUs are idle",
}
JOB_STOP_SUBJECT = "Your job {holder} was cancelled: its GPUs were idle"


def clock_time(at: float) -> str:
    return time.strftime("at %H:%M %Z", time.localtime(at))


def notice(event: Event, cfg: PortalConfig, address: str, page: str) -> EmailMessage:
    """The mail of a warning, a stop or a flag: what happened, why, and where to act."""
    what = "Your JupyterLab server" if event.server else f"Your job {event.holder}"
    subject = (SUBJECTS[event.act] if event.server or event.act != Act.STOP.value else JOB_STOP_SUBJECT)
    message = EmailMessage()
    message["Subject"] = subject.format(holder=event.holder,
                                        deadline=clock_time(event.deadline) if event.deadline else "soon")
    message["From"], message["To"] = cfg.mail_from, address
    message["Date"], message["Message-ID"] = formatdate(localtime=True), make_msgid(domain="dsportal.local")
    lines = [f"{what}: {event.reason}."]
    if event.act == Act.WARN.value:
        lines.append(f"To keep it, open {page} and press \"Keep it\"; work on its GPUs keeps it too.")
    elif event.act == Act.STOP.value and event.server:
        lines.append("Everything you saved is in your home. Start it again from the hub when you need it.")
    elif event.act == Act.FLAG.value:
        lines.append(f"Its page shows its GPUs node by node: {page}")
    message.set_content("\n\n".join(lines) + "\n")
    return message


class GpuWatcher:
    """portal.gpus.watch's passes, carried out by the dashboard: `start` runs them every gpu_read_every_s."""

    def __init__(self, cfg: PortalConfig, snapshot: Callable[[], ClusterSnapshot], directory: HubDirectory,
                 board: JobBoard, executor: Executor, mail: Callable[[EmailMessage, PortalConfig], None] = send,
                 clock: Callable[[], float] = time.time):
        """`snapshot`: the scheduler's own answer, asked every pass (never the pages' cache: an answer the watch
        asked for would be served to pages past the moment the scheduler stopped answering)."""
        self.cfg, self.snapshot, self.directory, self.board = cfg, snapshot, directory, board
        self.executor, self._mail, self._clock = executor, mail, clock
        self.folder = readings_dir(cfg)
        self.watch = Watch(self.folder, clock)
        self.ledger = Ledger(self.folder)
        self._timer: PeriodicCallback | None = None
        self._running = False
        self._failing: str | None = None  # the last failed pass's reason, while passes fail

    def rule(self, groups: tuple[str, ...]) -> Rule | None:
        idle_s = self.cfg.gpu_idle_s_for(groups)
        return Rule(idle_s, self.cfg.gpu_idle_grace_s, self.cfg.gpu_idle_stop_jobs) if idle_s else None

    async def _blocking(self, fn: Callable[..., T], *args: object) -> T:
        return await asyncio.get_running_loop().run_in_executor(self.executor, fn, *args)

    async def once(self) -> list[Event]:
        """One pass; the events it decided, carried out. Where no node's reader writes (no readings directory: a
        cluster without readers yet), there is nothing to watch."""
        if not self.folder.is_dir():
            return []
        snapshot = await self._blocking(self.snapshot)
        holders = [Holder(job.id, job.user, job.server) for job in snapshot.queue.values()
                   if job.state == RUNNING and job.gpus > 0 and job.user]
        try:
            roster = await self.directory.roster()
        except HubUnavailable:  # whose groups, unknown: nothing decided, every clock kept as it was
            self.watch.once([], {}, lambda h: None, unsure=[h.id for h in holders])
            raise
        groups = {name: HubUser.from_model(model).groups for name, model in roster.items()}
        readings = await self._blocking(latest, self.folder, self._clock)
        events = self.watch.once(holders, readings, lambda holder: self.rule(groups.get(holder.user, ())))
        await self._blocking(self.ledger.count, self._clock())  # held and busy GPU-seconds, for the Usage page
        for event in events:
            await self.carry_out(event)
        return events

    async def carry_out(self, event: Event) -> None:
        if event.act == Act.STOP.value:
            try:
                if event.server:
                    await self.directory.stop_server(event.user)
                else:
                    await self._blocking(self.board.cancel, HubUser(event.user), event.holder)
            except Exception as err:  # the hub or the scheduler refused: logged; the watch asks again later
                log.warning("gpu watch: stopping %s of %s failed: %s", event.holder, event.user, err)
                return
        if event.act in (Act.WARN.value, Act.STOP.value, Act.FLAG.value):
            WATCH_EVENTS.labels(event.act, "server" if event.server else "job").inc()  # the operators' counter
            await self._blocking(self.tell, event)

    def page_of(self, event: Event) -> str:
        prefix = f"{self.cfg.hub_url}/services/portal"
        return f"{prefix}/gpus" if event.server else f"{prefix}/jobs/{event.holder}"

    def tell(self, event: Event) -> None:
        """The event's mail to its user, at the directory's address; a failure is a line of the log."""
        try:
            message = notice(event, self.cfg, owner_address(event.user, self.cfg), self.page_of(event))
            self._mail(message, self.cfg)
        except (NoAddress, OSError) as err:
            log.warning("gpu watch: no mail to %s about %s: %s", event.user, event.holder, err)
            return
        log.info("gpu watch: mailed %s about %s (%s)", event.user, event.holder, event.act)

    async def _tick(self) -> None:
        if self._running:  # a slow pass (a slow hub) is not run twice at once
            return
        self._running = True
        try:
            await self.once()
        except Exception as err:  # a pass that fails (a scheduler that does not answer) is logged when its reason
            if str(err) != self._failing:  # changes, not every 10 s; the next pass tries again
                log.warning("gpu watch: the pass failed: %s", err, exc_info=self._failing is None)
            self._failing = str(err)
        else:
            if self._failing is not None:
                log.info("gpu watch: passes work again")
            self._failing = None
        finally:
            self._running = False

    def start(self) -> None:
        self._timer = PeriodicCallback(self._tick, self.cfg.gpu_read_every_s * 1000)
        self._timer.start()

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.stop()
