"""Where a user's TensorBoard shows one training run: the one URL builder for the dashboard and the notebooks.

The single-user server serves TensorBoard at `/user/<name>/tensorboard/` (jupyter-server-proxy) over the user's
`~/jobs`, so a job's run is named `<cluster>/<job id>/tensorboard` there (`<job id>/tensorboard` for a job of the
layout before per-cluster directories: JobRecord.run_prefix). TensorBoard 2.15 opens on its time-series
dashboard, which reads two filters from the URL's query: `runFilter` (a regex over run names) and `tagFilter`
(a regex over tags). The panel uses both: that one job's runs, and only its images/sec and mean AUROC charts.
(The legacy scalars dashboard's `#scalars&regexInput=` filters tags, not runs, so it cannot narrow to a job.)
"""

from __future__ import annotations

import re
from urllib.parse import quote, urlencode

TENSORBOARD_PREFIX = "tensorboard/"
# The two charts to watch; the per-class AUROC charts are one click away (clear the filter).
PANEL_TAG_FILTER = "^(throughput/images_per_sec|auroc/mean)$"


def run_regex(run_prefix: str) -> str:
    """The run-name regex that matches exactly one job's runs: those below its JobRecord.run_prefix
    ("dsportal/42", or "42" in the older layout)."""
    return f"^{re.escape(str(run_prefix))}/"


def _base(base_url: str) -> str:
    return base_url if base_url.endswith("/") else base_url + "/"


def panel_url(user: str, run_prefix: str, base_url: str = "/") -> str:
    """The user's TensorBoard narrowed to one job's throughput and AUROC charts (`run_prefix`: its
    JobRecord.run_prefix), e.g. `/user/alice/tensorboard/?runFilter=%5Edsportal%2F42%2F&tagFilter=...#timeseries`."""
    query = urlencode({"runFilter": run_regex(run_prefix), "tagFilter": PANEL_TAG_FILTER}, quote_via=quote, safe="")
    return f"{_base(base_url)}user/{quote(user, safe='')}/{TENSORBOARD_PREFIX}?{query}#timeseries"


def lab_url(user: str, path: str, base_url: str = "/") -> str:
    """JupyterLab at a file of the user's home, e.g. `/user/alice/lab/tree/notebooks/train.ipynb`."""
    return f"{_base(base_url)}user/{quote(user, safe='')}/lab/tree/{quote(path.lstrip('/'))}"


def runs_url(user: str, run_prefixes: list[str], base_url: str = "/") -> str:
    """The user's TensorBoard showing several runs together (the experiments page's chosen runs of one owner): a
    `runFilter` matching each prefix exactly or followed by "/", every tag shown."""
    either = "|".join(re.escape(str(prefix)) for prefix in dict.fromkeys(run_prefixes))
    query = urlencode({"runFilter": f"^({either})(/|$)"}, quote_via=quote, safe="")
    return f"{_base(base_url)}user/{quote(user, safe='')}/{TENSORBOARD_PREFIX}?{query}#timeseries"
