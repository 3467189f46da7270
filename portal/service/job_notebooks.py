"""The job page's "Open in a notebook": the job's notebook (portal.job_notebook) written into its directory as its
owner, where JupyterLab opens it; or, where the dashboard cannot reach the owner's home, the words that say how to
load the job in their own JupyterLab."""

from __future__ import annotations

from pathlib import Path

from portal.job_notebook import NOTEBOOK_NAME, job_notebook
from portal.jobs import Job
from portal.records.account import job_user
from portal.service.base import UserError

# Where the dashboard cannot write the job's notebook into the owner's home (Kubernetes: the home is a volume that
# only the user's pods mount), the page says how to load the job in their own JupyterLab instead.
NOTEBOOK_ELSEWHERE = ("Open in a notebook is not offered here: the dashboard cannot write into your home volume. "
                      "In your JupyterLab, `from portal import jobs; job = jobs.get(\"{id}\")` loads this job.")


def write_job_notebook(job: Job) -> str:
    """The job's notebook written into its directory as its owner, unless there already (the user's edits are
    kept); returns its path in the owner's home, as JupyterLab opens it."""
    owner = job_user(job.owner)
    path = Path(job.job_dir) / NOTEBOOK_NAME.format(id=job.id)
    try:
        in_home = path.relative_to(owner.home)
    except ValueError:
        raise UserError(409, f"job {job.id}'s directory {job.job_dir} is outside your home, where JupyterLab "
                               "cannot open it") from None
    result = owner.run(["/bin/sh", "-c", 'umask 077 && { [ -e "$1" ] || cat > "$1"; }', "sh", str(path)],
                       input=job_notebook(job.id), check=False)
    if result.returncode != 0:
        raise UserError(409, f"job {job.id}'s notebook could not be written in {job.job_dir}: "
                               f"{result.stderr.strip()[:200] or f'exit status {result.returncode}'}")
    return str(in_home)
