"""The one TensorBoard URL builder (the dashboard's panel, the notebooks' later) and JupyterLab links."""

from __future__ import annotations

import re
from urllib.parse import parse_qs, urlsplit

from portal.tensorboard import PANEL_TAG_FILTER, lab_url, panel_url, run_regex


def test_panel_url_filters_the_time_series_to_the_jobs_runs_and_its_throughput_and_auroc_tags():
    parts = urlsplit(panel_url("alice", "dsportal/42"))
    assert parts.path == "/user/alice/tensorboard/" and parts.fragment == "timeseries"
    query = parse_qs(parts.query)
    assert query == {"runFilter": ["^dsportal/42/"], "tagFilter": [PANEL_TAG_FILTER]}
    tags = re.compile(PANEL_TAG_FILTER)
    assert all(tags.search(tag) for tag in ["throughput/images_per_sec", "auroc/mean"])
    assert not any(tags.search(tag) for tag in ("auroc/Hernia", "auroc/mean_x", "loss/train", "learning_rate"))
    assert "/" not in parts.query and "^" not in parts.query  # every regex character is escaped


def test_panel_url_honours_the_hub_base_url_with_or_without_its_slash():
    assert panel_url("bob", "7", "/jhub/").startswith("/jhub/user/bob/tensorboard/?")
    assert panel_url("bob", "7", "/jhub") == panel_url("bob", "7", "/jhub/")


def test_run_regex_matches_only_that_jobs_runs_of_that_cluster():
    """Runs are named by their logdir below ~/jobs: "<cluster>/<id>/tensorboard" (JobRecord.run_prefix), or
    "<id>/tensorboard" for a job of the older layout."""
    pattern = re.compile(run_regex("dsportal/42"))
    assert pattern.search("dsportal/42/tensorboard") and pattern.search("dsportal/42/tensorboard/trial-3")
    for other in ("dsportal/142/tensorboard", "dsportal/420/tensorboard", "dsportal_test/42/tensorboard",
                  "42/tensorboard", "other/dsportal/42/tensorboard"):
        assert not pattern.search(other), other
    old = re.compile(run_regex("42"))
    assert old.search("42/tensorboard") and not old.search("dsportal/42/tensorboard")
    local = re.compile(run_regex("dsportal/local-20260101T000000-abcdef"))
    assert local.search("dsportal/local-20260101T000000-abcdef/tensorboard")


def test_lab_url_opens_a_file_in_the_users_jupyterlab():
    assert lab_url("alice", "notebooks/train horovod.ipynb") == (
        "/user/alice/lab/tree/notebooks/train%20horovod.ipynb")
