"""The dashboard's submit form shows the values a submit will use (portal.service.pages): choices as choices, every
field prefilled with what leaving it out would give (the API's defaults for the user's limits now) or with what
was given, and one line that sums the request up. portal.js keeps that line in step as fields change
(tests/browser/test_portal_js.py checks that it writes the same words)."""

from __future__ import annotations

from dataclasses import replace

from portal.quota import GpuHolder, GpuQuota
from portal.records.budget import GpuBudget
from portal.records.limits import JobLimits
from portal.records.programs import registry
from portal.records.spec import parse_job_spec
from portal.service.submit_form import form_fields, form_summary, form_values, request_summary
from programkit.reference import MODELS
from tests.conftest import TOY

LIMITS = JobLimits(partition="gpu", nodes=2, gpus_per_node=4, cpus_per_node=8, memory_gb_per_node=20,
                   max_minutes=None, quota=GpuQuota(4, ("gpu-users",), (GpuHolder("4", 1, server=True),)),
                   default_data_dir="/data/chestxray14")


def test_every_field_is_prefilled_with_what_the_api_would_use_for_it():
    shown = form_values(LIMITS, {})
    assert shown == parse_job_spec({}, LIMITS, user_can_read=lambda path: True).to_dict()
    assert (shown["memory_gb"], shown["cpus_per_task"], shown["gpus_per_node"]) == (16, 4, 1)
    assert shown["data_dir"] == "/data/chestxray14" and shown["model"] in MODELS
    small = replace(LIMITS, cpus_per_node=2, memory_gb_per_node=3, max_minutes=60, max_jobs=1, jobs_queued=1)
    assert form_values(small, {})["memory_gb"] == 3 and form_values(small, {})["time_limit"] == "01:00:00"


def test_what_was_given_is_shown_over_the_defaults_and_empty_fields_are_not():
    shown = form_values(LIMITS, {"nodes": "2", "epochs": "", "model": "densenet121", "fp16": False})
    assert shown["nodes"] == "2" and shown["epochs"] == 5 and shown["fp16"] is False


def test_choices_are_selects_and_every_field_says_what_is_allowed():
    fields = {field.name: field for field in form_fields(LIMITS)}
    assert fields["template"].kind == "select"
    assert fields["template"].choices == registry().names == ("chexnet", "chexnet-torch", TOY)  # TOY: the site's
    assert fields["model"].kind == "select" and fields["model"].choices == MODELS
    assert fields["gpus_per_node"].hint.startswith("0-3")  # 1 of her 4 GPUs is her server's
    assert fields["memory_gb"].hint == "GB per node, 1-20"
    assert all(field.hint for field in fields.values())


def test_the_summary_line_adds_the_request_up_against_the_quota_its_most_gpu_hours_and_the_budget_left():
    values = {**form_values(LIMITS, {}), "nodes": "2"}
    assert request_summary(values, LIMITS) == ("2 nodes x 1 GPU, 8 CPUs and 32 GB in all, at most 4 h, so at most 8 "
                                               "GPU-hours; 2 of your 4 GPUs (1 in use now)")
    assert form_summary(values, LIMITS, "sweep", {"sweep_trials": "3"}) == (
        "2 nodes x 1 GPU, 8 CPUs and 32 GB in all, at most 4 h a trial, so at most 24 GPU-hours for 3 trials; 2 of "
        "your 4 GPUs (1 in use now)")
    assert form_summary(values, LIMITS, "single", {"sweep_trials": "3"}) == request_summary(values, LIMITS)
    assert form_summary(values, LIMITS, "sweep", {"sweep_trials": "three"}) == ""  # the field's own error says why
    cpu = {**values, "nodes": 1, "gpus_per_node": 0, "cpus_per_task": 2, "time_limit": "00:30:05"}
    assert request_summary(cpu, replace(LIMITS, quota=GpuQuota(4))) == \
        "1 node x 0 GPUs, 2 CPUs and 16 GB in all, at most 31 min; 0 of your 4 GPUs"  # no GPU: no GPU-hours
    budgeted = replace(LIMITS, budget=GpuBudget(40, 34.5, "Sunday 29 November 00:00"))
    assert request_summary(values, budgeted) == request_summary(values, LIMITS) + (
        "; 5.5 of your weekly 40 GPU-hours left (34.5 used since Sunday 29 November 00:00)")
    assert request_summary({**values, "nodes": "two"}, LIMITS) == ""  # the field's own error says why
    assert request_summary({**values, "time_limit": "4h"}, LIMITS) == ""


def test_mail_starts_as_the_scheduler_offers_it_and_a_given_no_stays_no():
    assert form_values(LIMITS, {})["mail"] is False  # no e-mail offered (Kubernetes, or job_mail off)
    slurm = replace(LIMITS, mail=True)
    assert form_values(slurm, {})["mail"] is True
    assert form_values(slurm, {"mail": False})["mail"] is False  # the user's default, or the old job's choice


def test_on_kubernetes_nodes_the_defaults_and_a_sweeps_trials_at_once_fit_beside_the_launcher():
    from portal.records.fit import NodeRoom, Shape
    from portal.service.submit_form import sweep_form_values

    # two nodes of 2 CPUs and 8 GB (the test box's): a 2-CPU worker could meet the launcher (1 CPU, 2 GB)
    box = replace(LIMITS, cpus_per_node=2, memory_gb_per_node=8, gpus_per_node=2, launcher=Shape(1000, 2048),
                  own_nodes=False, rooms=tuple(NodeRoom(f"kubec-{i}", Shape(2000, 8192, 2)) for i in (1, 2)))
    shown = form_values(box, {})
    assert (shown["nodes"], shown["cpus_per_task"], shown["memory_gb"]) == (1, 2, 8)  # the other node is free
    two = form_values(box, {"nodes": "2"})
    assert (two["cpus_per_task"], two["memory_gb"]) == (1, 6)  # one of the 2 pods meets the launcher
    assert "the job's launcher takes 1 CPU and 2 GB on one node" in form_fields(box)[4].hint
    # trials bring no launcher; 2 CPUs each, one a node, of the quota's 3 GPUs left: 2 at once
    assert sweep_form_values({}, box)["sweep_parallel"] == "2"
    one_node = replace(box, rooms=box.rooms[:1])
    assert sweep_form_values({}, one_node)["sweep_parallel"] == "1"  # "2" would be refused
    assert sweep_form_values({})["sweep_parallel"] == "2"  # no limits: the plain default
