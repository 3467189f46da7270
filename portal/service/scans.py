"""What the board keeps of a scan of a user's jobs, and whether they may have changed since, found without running
anything as the user: the (device, inode, ctime) of their home, of ~/jobs and of this cluster's ~/jobs/<cluster>,
read by lstat as the service; where the scheduler keeps the records itself, its own stamp of them
(portal.scheduler.protocol.KeepsRecords.records_stamp: on Kubernetes, what one watch of the API server counted).
"""

from __future__ import annotations

import functools
import os
import pwd
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from portal.config import PortalConfig
from portal.records.record import JOBS_ROOT
from portal.scheduler.registry import scheduler_for

if TYPE_CHECKING:
    from portal.scheduler.protocol import KeepsRecords

# A change this close before a stamp was read may share its timestamp tick with a later one (ext4 stamps in
# jiffies): such a stamp is not trusted to show "unchanged" (the "racy git" rule).
RACY_NS = 1_000_000_000


@dataclass(frozen=True)
class DirStamp:
    """What the file system says of a user's home, ~/jobs and ~/jobs/<cluster>: (device, inode, ctime) of each, and
    when read."""

    fields: tuple[int, ...]
    newest_change_ns: int
    read_at_ns: int

    def same_as(self, later: DirStamp | None) -> bool:
        """Nothing was added, removed or renamed in between: the same fields, and the last change older than
        RACY_NS before this reading (a change in the same tick as this reading would not show in the later one).
        ctime, not mtime: a user can set mtime back (touch -d), never ctime."""
        return later is not None and later.fields == self.fields and \
            self.read_at_ns - self.newest_change_ns > RACY_NS


def jobs_dir_stamp(user: str, cluster: str) -> DirStamp | None:
    """The stamp of the user's home, ~/jobs and ~/jobs/<cluster> (each absent: zeros), by lstat as the service: no
    link is followed and nothing is read, it only says whether to list again. None where the service may not look
    (a root-squashed NFS home): then the jobs are listed as the user every `rescan_s`."""
    try:
        home = pwd.getpwnam(user).pw_dir
        found = [os.lstat(home)]
    except (KeyError, OSError):
        return None
    for place in (os.path.join(home, JOBS_ROOT), os.path.join(home, JOBS_ROOT, cluster)):
        try:
            found.append(os.lstat(place))
        except FileNotFoundError:
            break
        except OSError:
            return None
    fields = tuple(v for st in found for v in (st.st_dev, st.st_ino, st.st_ctime_ns))
    return DirStamp(fields + (0,) * (9 - len(fields)), max(st.st_ctime_ns for st in found), time.time_ns())


def change_stamps(cfg: PortalConfig) -> Callable[[str], Any]:
    """The dashboard's stamp of a user's jobs (`same_as` a later one: nothing new to list): their ~/jobs's where
    the records are in the homes, else the scheduler's own (`records_stamp`: on Kubernetes, one watch per process)."""
    scheduler = scheduler_for(cfg)
    if scheduler.records_in_home:
        return functools.partial(jobs_dir_stamp, cluster=cfg.cluster_name)
    return cast("KeepsRecords[Any]", scheduler).records_stamp


@dataclass
class UserRecords:
    """One user's jobs as last scanned: job id -> (directory stamp, Job or UnreadableJob); `dir_stamp`: the
    home's before the scan."""

    scanned_at: float
    jobs: dict[str, tuple[str | None, Any]] = field(default_factory=dict)
    dir_stamp: Any = None  # a DirStamp, the scheduler's records_stamp, or None: listed again at the next rescan
