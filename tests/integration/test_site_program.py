"""A site's own training program in the dashboard (docs/admin-guide.md, "A site's own training program"): the test
boxes' settings register the toy program and its launcher (tests/toyprogram: NumPy and the program kit, no framework),
copied to a directory every user reads (tests/conftest.py), and nothing else names them. The form offers it beside
the portal's programs, a job of it submitted through the dashboard's API names the site's directory to its
processes, and its page shows it with its own fields (its card, once it ends, as every program's).

Its jobs and sweeps run to COMPLETED on each box in tests/kubernetes/test_jobs_on_both_schedulers.py; its own behaviour
(resume, trials, pruning, MLflow) the program contract's (tests/programs), box-free."""

from __future__ import annotations

from pathlib import Path

import pytest

from portal import jobs
from portal.jobs.demo_data import LAYOUT_NAME
from tests.conftest import TOY, page_error
from tests.integration.helpers import PORTAL, TINY, portal_client

pytestmark = pytest.mark.integration


def test_the_dashboard_offers_takes_and_shows_a_site_program(cluster, hub, demo_data, no_jobs_left):
    session = hub.login("alice")
    form = session.get(f"{hub.url}{PORTAL}submit", timeout=60)
    assert form.status_code == 200 and f'value="{TOY}"' in form.text, page_error(form)
    client = portal_client(hub, "alice")
    images = str(Path(demo_data).parent / LAYOUT_NAME)  # the toy reads PNGs (the demo set's original layout)
    request = {**TINY, "template": TOY, "data_dir": images, "epochs": 1, "gpus_per_node": 0, "grid": 3}
    submitted = client.post(f"{client.base}jobs", json=request, timeout=60)
    assert submitted.status_code == 201, submitted.text
    job = jobs.get(submitted.json()["id"], user="alice")
    script = Path(job.job_dir, "job.sbatch").read_text()
    assert f"export PYTHONPATH={cluster.site_python_path}" in script  # where the users' jobs find the site's package
    page = session.get(f"{hub.url}{PORTAL}jobs/{job.id}", timeout=60)
    assert page.status_code == 200 and f'<dd class="col-sm-9 col-lg-4">{TOY}</dd>' in page.text, page_error(page)
    assert '<dd class="col-sm-9 col-lg-4" id="options">grid 3</dd>' in page.text  # its own field
