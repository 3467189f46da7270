"""Where a user's TensorBoard shows one training run: the one URL builder for the dashboard and the notebooks.

The single-user server serves TensorBoard at `/user/<name>/tensorboard/` (jupyter-server-proxy) over the user's
`~/jobs`, so a job's run is named `<job id>/tensorboard` there. The URL filters the runs to that job both ways
TensorBoard 2.x reads a filter: `runFilter` (the time-series dashboard's query parameter) and the legacy scalars
dashboard's `#scalars&regexInput=` fragment.
"""

from __future__ import annotations

import re
from urllib.parse import quote

TENSORBOARD_PREFIX = "tensorboard/"


def run_regex(job_id: str) -> str:
    """The run-name regex that matches exactly one job's runs (job ids are digits or `local-...`)."""
    return f"^{re.escape(str(job_id))}/"


def panel_url(user: str, job_id: str, base_url: str = "/") -> str:
    """The user's TensorBoard filtered to one job, e.g. `/user/alice/tensorboard/?runFilter=%5E42%2F#scalars&...`."""
    base = base_url if base_url.endswith("/") else base_url + "/"
    regex = quote(run_regex(job_id), safe="")
    return (f"{base}user/{quote(user, safe='')}/{TENSORBOARD_PREFIX}?runFilter={regex}"
            f"#scalars&regexInput={regex}")


def lab_url(user: str, path: str, base_url: str = "/") -> str:
    """JupyterLab at a file of the user's home, e.g. `/user/alice/lab/tree/notebooks/train.ipynb`."""
    base = base_url if base_url.endswith("/") else base_url + "/"
    return f"{base}user/{quote(user, safe='')}/lab/tree/{quote(path.lstrip('/'))}"
