"""JobSpec validation: every rule, and that each error names the field and what is allowed."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from portal.quota import GpuHolder, GpuQuota
from portal.records.limits import JobLimits
from portal.records.spec import FIELDS, JobSpec, JobSpecError, parse_job_spec
from tests.unit.helpers import SPEC_DATA_DIR as DATA
from tests.unit.helpers import SPEC_LIMITS as LIMITS
from tests.unit.helpers import parse_spec as parse
from tests.unit.helpers import spec_readable as readable

NO_GPUS = replace(LIMITS, quota=GpuQuota(0, ("datascientists",)))


def refused(field: str, *allowed: str, limits: JobLimits = LIMITS, **raw) -> str:
    with pytest.raises(JobSpecError) as err:
        parse(limits, **raw)
    assert err.value.field == field
    message = str(err.value)
    assert message.startswith(f"{field}: ")
    for words in allowed:
        assert words in message, message
    return message


def test_the_spec_has_exactly_the_designed_fields():
    assert FIELDS == ("template", "nodes", "gpus_per_node", "cpus_per_task", "memory_gb", "time_limit", "epochs",
                      "batch_size", "image_size", "model", "fp16", "xla", "mail", "data_dir")


def test_template_alone_is_a_valid_job_with_sensible_defaults():
    spec = parse()
    assert spec == JobSpec(template="chexnet", nodes=1, gpus_per_node=1, cpus_per_task=4, memory_gb=16,
                           time_limit="04:00:00", epochs=5, batch_size=16, image_size=224, model="densenet121",
                           fp16=False, xla=False, data_dir=DATA)
    assert parse_job_spec({}, LIMITS, readable) == spec


def test_defaults_shrink_to_what_the_user_and_partition_allow():
    spec = parse(NO_GPUS)  # bob: no GPU quota, so the default is a CPU-only job, not an error
    assert (spec.gpus_per_node, spec.workers) == (0, 1)
    small = JobLimits(**{**LIMITS.__dict__, "cpus_per_node": 2, "memory_gb_per_node": 3, "max_minutes": 60})
    spec = parse(small, gpus_per_node=2)
    assert (spec.cpus_per_task, spec.memory_gb, spec.time_limit) == (1, 3, "01:00:00")


def test_every_field_at_its_limits():
    spec = parse(nodes=1, gpus_per_node=4, cpus_per_task=2, memory_gb=19, time_limit="168:00:00", epochs=1000,
                 batch_size=1024, image_size=1024, model="resnet50", fp16=True, xla=True, data_dir=DATA)
    assert (spec.workers, spec.gpus) == (4, 4)
    low = parse(gpus_per_node=0, cpus_per_task=8, memory_gb=1, time_limit="00:00:01", epochs=1, batch_size=1,
                image_size=32)
    assert low.workers == 1


def test_unknown_fields_are_refused_with_the_list_of_fields():
    refused("partition", "unknown field", "allowed fields: template, nodes, gpus_per_node", partition="gpu")


def test_template_must_be_a_known_kind():
    refused("template", "'pytorch' is not a training program here", "allowed: chexnet, chexnet-torch",
            template="pytorch")


@pytest.mark.parametrize("value", [True, False, 2.0, 1.5, "2.0", "two", "", None, [1]])
def test_integers_refuse_bools_floats_and_words(value):
    refused("epochs", "is not a whole number", "allowed: 1-1000", epochs=value)


def test_integers_accept_whole_numbers_as_text():
    assert parse(epochs="7", nodes=" 2 ").epochs == 7


@pytest.mark.parametrize(("field", "value", "allowed"), [
    ("nodes", 0, "allowed: 1-2 (usable nodes in partition gpu)"),
    ("nodes", 3, "allowed: 1-2 (usable nodes in partition gpu)"),
    ("gpus_per_node", 5, "allowed: 0-4 (GPUs per node in partition gpu)"),
    ("gpus_per_node", -1, "allowed: 0-4"),
    ("cpus_per_task", 0, "allowed: 1-8 (8 CPUs per node in partition gpu, shared by 1 worker(s))"),
    ("memory_gb", 20, "allowed: 1-19 (GB per node in partition gpu)"),
    ("epochs", 0, "allowed: 1-1000"),
    ("batch_size", 1025, "allowed: 1-1024 (images per GPU per step)"),
    ("image_size", 31, "allowed: 32-1024 (pixels, square)"),
])
def test_integer_bounds(field, value, allowed):
    refused(field, f"{value} is out of range", allowed, **{field: value})


def test_cpus_are_shared_by_the_workers_of_a_node():
    refused("cpus_per_task", "allowed: 1-2 (8 CPUs per node in partition gpu, shared by 4 worker(s))",
            gpus_per_node=4, cpus_per_task=3)


def test_the_gpu_quota_counts_every_node():
    refused("gpus_per_node", "allowed: 0-2 (your GPU quota is 4 for all nodes together",
            nodes=2, gpus_per_node=3)
    assert parse(nodes=2, gpus_per_node=2).gpus == 4


BUSY = replace(LIMITS, quota=replace(LIMITS.quota, holders=(GpuHolder("12", 1), GpuHolder("3", 1, server=True))))


def test_the_quota_counts_what_the_user_holds_and_shows_the_arithmetic():
    message = refused("gpus_per_node", limits=BUSY, gpus_per_node=4)
    assert message == "gpus_per_node: you use 2 of your 4 GPUs (job 12, your server); ask for at most 2"
    assert refused("gpus_per_node", limits=BUSY, nodes=2, gpus_per_node=2).endswith(
        "ask for at most 1 per node on 2 nodes")
    assert parse(BUSY, gpus_per_node=2).gpus == 2
    assert parse(BUSY, nodes=2, gpus_per_node=1).gpus == 2
    # what a node has is still its own error, whatever the quota
    refused("gpus_per_node", "5 is out of range; allowed: 0-4 (GPUs per node in partition gpu)",
            limits=BUSY, gpus_per_node=5)


def test_a_used_up_quota_lowers_the_default_job_to_cpu_only():
    full = replace(LIMITS, quota=replace(LIMITS.quota, holders=(GpuHolder("7", 4),)))
    assert parse(full).gpus_per_node == 0
    assert refused("gpus_per_node", limits=full, gpus_per_node=1).endswith("(job 7); ask for at most 0")
    over = replace(LIMITS, quota=replace(LIMITS.quota, holders=(GpuHolder("7", 4), GpuHolder("8", 1))))
    assert refused("gpus_per_node", limits=over, gpus_per_node=1) == (
        "gpus_per_node: your jobs and server hold or wait for 5 GPUs, more than your quota of 4 (job 7, job 8); "
        "ask for at most 0")


def test_a_user_at_the_job_limit_is_refused_before_anything_else_and_one_below_is_not():
    at_limit = JobLimits(**{**LIMITS.__dict__, "jobs_queued": 50, "max_jobs": 50})
    assert refused("spec", limits=at_limit, epochs=1) == (
        "spec: you have 50 jobs queued or running (your server included); allowed: at most 50 at once: cancel one "
        "or wait for one to end")
    assert parse(JobLimits(**{**LIMITS.__dict__, "jobs_queued": 49, "max_jobs": 50})).epochs == 5
    assert parse(JobLimits(**{**LIMITS.__dict__, "jobs_queued": 500})).epochs == 5  # no limit: none counted


def test_drained_nodes_are_named_when_nodes_are_refused():
    drained = JobLimits(**{**LIMITS.__dict__, "nodes": 1, "unusable_note": "; not usable now: node2 (idle+drain)"})
    refused("nodes", "2 is out of range; allowed: 1 (usable nodes in partition gpu; not usable now: node2 "
                     "(idle+drain))", limits=drained, nodes=2)


def test_no_quota_means_no_gpus_and_says_why():
    message = refused("gpus_per_node", "1 is out of range", "allowed: 0 (your GPU quota is 0",
                      "your groups: datascientists", limits=NO_GPUS, gpus_per_node=1)
    assert "0-0" not in message


@pytest.mark.parametrize("value", ["4:00", "04:00:60", "1-00:00:00", "abcd", 3600, "", "1000:00:00"])
def test_time_limit_format(value):
    refused("time_limit", "is not a wall time", "allowed: HH:MM:SS from 00:00:01 up to 168:00:00 (in partition gpu)",
            time_limit=value)


def test_time_limit_within_the_partition():
    refused("time_limit", "168:00:01 exceeds the limit", "up to 168:00:00", time_limit="168:00:01")
    refused("time_limit", "must be longer than 00:00:00", time_limit="00:00:00")
    unlimited = JobLimits(**{**LIMITS.__dict__, "max_minutes": None})
    assert parse(unlimited, time_limit="999:00:00").time_limit == "999:00:00"
    refused("time_limit", "up to no limit", limits=unlimited, time_limit="x")


def test_model_choices():
    refused("model", "'vgg16' is not offered", "allowed: densenet121, resnet50", model="vgg16")


@pytest.mark.parametrize(("value", "expected"), [(True, True), (False, False), ("true", True), ("False", False)])
def test_booleans_accept_true_and_false(value, expected):
    assert parse(fp16=value).fp16 is expected
    assert parse(xla=value).xla is expected


@pytest.mark.parametrize("value", [1, 0, "yes", "1", None])
def test_booleans_refuse_anything_else(value):
    refused("xla", "is not a boolean", "allowed: true, false", xla=value)


def test_data_dir_is_normalised_then_checked():
    assert parse(data_dir="/scratch/./x/../set/").data_dir == "/scratch/set"
    assert parse(data_dir="//scratch//set").data_dir == "/scratch/set"


@pytest.mark.parametrize(("value", "why"), [
    ("data/chestxray14", "is relative"),
    ("", "is not a path"),
    (7, "is not a path"),
    ("/data/x\n", "control character"),
    ("/data/elsewhere", "does not exist or you cannot read it"),
    ("/scratch/set/../../etc", "'/etc' does not exist or you cannot read it"),
])
def test_data_dir_refusals(value, why):
    refused("data_dir", why, "allowed: an absolute path of a directory you can read", data_dir=value)


def test_the_default_data_dir_is_checked_too():
    missing = JobLimits(**{**LIMITS.__dict__, "default_data_dir": "/nowhere"})
    refused("data_dir", "'/nowhere' does not exist", limits=missing)


def test_the_default_readability_check_is_the_callers(tmp_path):
    spec = parse_job_spec({"data_dir": str(tmp_path)}, LIMITS)
    assert spec.data_dir == str(tmp_path)
    with pytest.raises(JobSpecError, match="data_dir"):
        parse_job_spec({"data_dir": str(tmp_path / "missing")}, LIMITS)


def test_a_spec_that_is_not_a_mapping():
    with pytest.raises(JobSpecError, match="^spec: expected a mapping"):
        parse_job_spec(["template"], LIMITS, readable)


# --- hostile input (issue 11): ASCII grammar, length caps, short echoes; generated specs ---

@pytest.mark.parametrize(("field", "value"), [("epochs", "٣"), ("nodes", "１"), ("batch_size", "1٦"),
                                              ("time_limit", "٠٤:00:00"), ("time_limit", "04:０0:00")])
def test_non_ascii_digits_are_refused(field, value):
    refused(field, "allowed:", **{field: value})


def test_a_140000_character_path_is_refused_by_its_length_before_the_os_sees_it():
    seen = []
    with pytest.raises(JobSpecError) as err:
        parse_job_spec({"data_dir": "/" + "a" * 140_000}, LIMITS, lambda path: seen.append(path) or True)
    assert err.value.field == "data_dir" and "at most 4096 characters" in str(err.value) and seen == []
    assert len(str(err.value)) < 600


def test_an_unknown_key_that_is_no_field_name_is_named_as_the_spec():
    for key in ("x" * 100_000, "a b", "\udcff"):
        with pytest.raises(JobSpecError) as err:
            parse_job_spec({key: 1}, LIMITS, readable)
        assert err.value.field == "spec" and "unknown field" in str(err.value) and len(str(err.value)) < 600


SPEC_VALID = {  # per field: mostly allowed, some just outside the bounds
    "template": st.sampled_from(["chexnet", "pytorch"]),
    "nodes": st.integers(0, 3) | st.sampled_from(["1", " 2 "]),
    "gpus_per_node": st.integers(0, 5) | st.sampled_from(["0", "1"]),
    "cpus_per_task": st.integers(0, 9) | st.just("2"),
    "memory_gb": st.integers(0, 20) | st.just("8"),
    "time_limit": st.sampled_from(["00:10:00", "04:00:00", "168:00:01", "1:00"]),
    "epochs": st.integers(0, 1001) | st.just("5"),
    "batch_size": st.integers(0, 1025),
    "image_size": st.integers(31, 1025),
    "model": st.sampled_from(["densenet121", "resnet50", "vgg"]),
    "fp16": st.booleans() | st.sampled_from(["true", "False"]),
    "xla": st.booleans() | st.sampled_from(["true", "no"]),
    "data_dir": st.sampled_from([DATA, "/scratch/./set", "relative", "/nowhere", "/" + "d" * 5000]),
}
SPEC_HOSTILE = (st.integers() | st.text(max_size=20) | st.sampled_from(["٣", "３", "٠٤:00:00", "x" * 5000])
                | st.lists(st.integers(), max_size=3) | st.none() | st.floats()
                | st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))


def mostly(valid):
    return st.integers(0, 7).flatmap(lambda n: SPEC_HOSTILE if n == 0 else valid)


SPECS = st.one_of(
    st.fixed_dictionaries({}, optional={name: mostly(valid) for name, valid in SPEC_VALID.items()}),
    st.dictionaries(st.sampled_from(FIELDS) | st.text(max_size=70), SPEC_HOSTILE, max_size=5),
)


@settings(max_examples=500, deadline=None)
@given(SPECS, st.sampled_from([LIMITS, NO_GPUS]))
def test_generated_specs_are_valid_within_bounds_or_refused_naming_a_field(raw, limits):
    try:
        spec = parse_job_spec(raw, limits, readable)
    except JobSpecError as err:
        assert err.field in (*FIELDS, "spec") or (err.field in raw and "unknown field" in err.message), str(err)
        assert len(str(err)) < 600
        return
    assert 1 <= spec.nodes <= limits.nodes and 0 <= spec.gpus <= limits.quota.limit
    assert 1 <= spec.cpus_per_task * spec.workers_per_node <= limits.cpus_per_node
    assert 1 <= spec.memory_gb <= limits.memory_gb_per_node and 1 <= spec.epochs <= 1000
    assert spec.time_limit.isascii() and spec.data_dir in (DATA, "/scratch/set")


def test_mail_is_offered_only_where_the_limits_say_so():
    slurm = replace(LIMITS, mail=True)
    assert parse(slurm).mail is True and parse(slurm, mail=False).mail is False  # omitted: the scheduler's default
    assert parse(LIMITS).mail is False and parse(LIMITS, mail=False).mail is False
    refused("mail", "not offered here", "allowed: false", mail=True)  # Kubernetes, or a site without job_mail
    refused("mail", "is not a boolean; allowed: true, false", limits=slurm, mail="yes")
    refused("mail", "is not a boolean", limits=slurm, mail=1)
