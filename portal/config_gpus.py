"""The settings of GPU use (docs/gpus.md), a part of every PortalConfig: when held GPUs count as idle, what the
portal then does, each group's weekly GPU-hours budget, and the operators' Prometheus: the token it reads the
figures with, and where the Operations page reads them back (docs/operations.md; portal.prometheus_access).

Per-group values follow the GPU quota's rule with one difference: a user in several groups gets the most lenient
of their groups' values, where 0 (never) is the most lenient of all.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from portal.config_values import setting


def most_lenient(values: Mapping[str, int], default: int, groups: Iterable[str]) -> int:
    """The value of a member of `groups`: 0 if any of their groups' is 0 (none), else the largest; `default` for a
    member of none of `values`' groups."""
    found = [values[g] for g in groups if g in values]
    if not found:
        return default
    return 0 if 0 in found else max(found)


@dataclass(frozen=True)
class GpuSettings:
    """GPU use (docs/gpus.md): idle GPUs given back, stalled jobs flagged"""

    gpu_read_every_s: int = setting(10, "Seconds between two readings of each node's GPUs (the nodes' readers) and "
                                    "between two passes of the GPU watch over them.")
    gpu_idle_s: Mapping[str, int] = setting(
        {}, "Seconds a server's GPUs may stay idle (every GPU it holds under 5 % busy) before its user is warned, "
            "per group (a member of several gets the longest; 0: never warned, never stopped). A job whose GPUs "
            "stay idle as long is flagged on its page. Users in none of these groups: default_gpu_idle_s.")
    default_gpu_idle_s: int = setting(1800, "gpu_idle_s of users in none of its groups (1800: 30 minutes); 0: "
                                      "never.")
    gpu_idle_grace_s: int = setting(3600, "Seconds after the warning before an idle server is stopped (3600: an "
                                    "hour), unless its user says \"keep it\" (which starts its idle clock again).")
    gpu_idle_stop_jobs: bool = setting(False, "Also cancel a flagged job once its grace has passed (as its owner "
                                       "would). Off: a stalled job is only flagged, and its user told.")

    gpu_hours_budget: Mapping[str, int] = setting(
        {}, "The GPU-hours each group's members may use a week (Sunday 00:00 to Sunday 00:00, Slurm's week), "
            "servers and jobs together, per group (a member of several gets the largest; 0: no budget). A job, "
            "sweep or server that could cost more than is left (nodes x GPUs x time limit x trials) is refused at "
            "submit; on Slurm, Slurm holds it too (GrpTRESMins, set by `python -m portal.accounts sync`). Users "
            "in none of these groups: default_gpu_hours_budget.")
    default_gpu_hours_budget: int = setting(0, "gpu_hours_budget of users in none of its groups; 0: no budget.")
    metrics_token_file: str = setting("", "A file (root's, mode 0600) whose first line is the API token a site's "
                                      "Prometheus reads the hub's /hub/metrics and the portal's metrics with: the "
                                      "hub registers it as the service `prometheus`, with read:metrics "
                                      "(docs/operations.md). Empty: <state_dir>/prometheus/metrics-token where "
                                      "prometheus_url is `box` (the box makes it), else no such service.")
    prometheus_url: str = setting("box", "The Prometheus server the Operations page draws its charts from: `box` "
                                  "(the box runs Debian's, scraping the hub and the portal), a site's server's "
                                  "http(s) URL, or empty (no charts; the page says so).")
    prometheus_reader_file: str = setting("", "A file (mode 0600) whose first line is `user:password`, the basic "
                                          "auth the dashboard reads prometheus_url with; empty: "
                                          "<state_dir>/prometheus/reader (the box's).")

    def gpu_idle_s_for(self, groups: Iterable[str]) -> int:
        """Seconds before a member of `groups` is warned of idle GPUs; 0: never."""
        return most_lenient(self.gpu_idle_s, self.default_gpu_idle_s, groups)

    def gpu_hours_budget_for(self, groups: Iterable[str]) -> int:
        """A member of `groups`'s weekly GPU-hours; 0: no budget."""
        return most_lenient(self.gpu_hours_budget, self.default_gpu_hours_budget, groups)
