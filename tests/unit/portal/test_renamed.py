"""`backend`, the old name of a job's scheduler, still works where old callers use it until BACKEND_GOES, with a
warning that names the new one; the docs give the same date (portal.renamed)."""

from __future__ import annotations

import importlib
import warnings
from pathlib import Path

import pytest

from portal import jobs
from portal.config import PortalConfig
from portal.renamed import BACKEND_GOES, ERRORS_GO, MOVED_ERRORS, renamed_keyword
from portal.service.summary import job_summary
from tests.conftest import REPO
from tests.unit.helpers import FakeJobsAPI


def test_the_old_keyword_renders_the_same_job_with_a_warning_that_names_the_new_one(tmp_path):
    spec = {"epochs": 1, "gpus_per_node": 0, "data_dir": str(tmp_path)}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the new name warns of nothing
        new = jobs.render(spec, scheduler="local", cfg=PortalConfig())
    with pytest.warns(DeprecationWarning, match=rf"render\(backend=...\) is deprecated and goes after "
                                                rf"{BACKEND_GOES}: it is now called scheduler="):
        old = jobs.render(spec, backend="local", cfg=PortalConfig())
    assert old == new and "horovodrun" in new


def test_both_names_that_disagree_are_refused_naming_both():
    @renamed_keyword("backend", "scheduler", BACKEND_GOES)
    def chosen(scheduler: str | None = None) -> str | None:
        return scheduler

    with pytest.raises(TypeError, match="backend='local' and scheduler='slurm' differ"):
        chosen(scheduler="slurm", backend="local")
    with pytest.warns(DeprecationWarning):
        assert chosen(scheduler="local", backend="local") == "local"
    assert chosen("slurm") == "slurm"


def test_a_job_answers_to_its_old_attribute_and_the_api_carries_both_names(tmp_path):
    job = FakeJobsAPI(tmp_path).add("alice", "7")
    with pytest.warns(DeprecationWarning, match=r"Job.backend is deprecated .* now called Job.scheduler.name"):
        assert job.backend == "slurm"
    assert job.scheduler.name == job.record.scheduler == "slurm"
    for answer in (job.to_dict(), job_summary(job, "COMPLETED", "", None)):
        assert answer["scheduler"] == answer["backend"] == "slurm"


@pytest.mark.parametrize("page", ["training.md", "user-guide.md"])
def test_the_docs_say_when_the_old_name_goes(page):
    text = (Path(REPO) / "docs" / page).read_text()
    assert BACKEND_GOES in text and "backend" in text


@pytest.mark.parametrize("name", ["SlurmError", "KubernetesError"])
def test_a_schedulers_error_still_answers_to_its_old_name_in_the_job_api_with_a_warning(name):
    """portal.jobs names no scheduler: its errors live in their packages, and a notebook catches SchedulerError.
    The old names still work until ERRORS_GO, as the same class, saying where it is going."""
    assert name not in jobs.__all__
    with pytest.warns(DeprecationWarning, match=rf"portal.jobs.{name} is deprecated and goes after {ERRORS_GO}: it "
                                                rf"is now called portal.jobs.SchedulerError") as caught:
        old = getattr(jobs, name)
    assert caught[0].filename == __file__  # the warning points at the caller's line
    assert old is getattr(importlib.import_module(MOVED_ERRORS[name]), name) and issubclass(old, jobs.SchedulerError)
    with pytest.raises(AttributeError, match="has no attribute 'NoSuchError'"):
        jobs.NoSuchError  # noqa: B018
    guide = (Path(REPO) / "docs" / "training.md").read_text()
    assert f"jobs.{name}" in guide and ERRORS_GO in guide
