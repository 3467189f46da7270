"""The server options model: every rule of the spawn form, without a scheduler."""

import pytest

from spawners.forms import (
    ClusterLimits,
    OptionsError,
    Partition,
    default_options,
    describe_minutes,
    parse_server_options,
    render_form,
)

GPU = Partition("gpu", cpus_per_node=8, memory_mb_per_node=20000, gpus_per_node=4, free_gpus_per_node=3,
                max_minutes=7 * 1440, default=True)
DEBUG = Partition("debug", cpus_per_node=8, memory_mb_per_node=20000, gpus_per_node=4, free_gpus_per_node=3,
                  max_minutes=60)
ALICE = ClusterLimits(partitions=(GPU, DEBUG), gpu_quota=4, groups=("datascientists", "gpu-users"))
BOB = ClusterLimits(partitions=(GPU, DEBUG), gpu_quota=0, groups=("datascientists",))


def form(**fields):
    """Form data as the hub passes it: every value a list of strings."""
    return {k: [str(v)] for k, v in fields.items()}


def test_form_values_become_typed_options():
    options = parse_server_options(form(partition="debug", gpus=2, cpus=4, memory_gb=8, runtime="00:30:00"), ALICE)
    assert options.to_dict() == {"partition": "debug", "gpus": 2, "cpus": 4, "memory_gb": 8, "runtime": "00:30:00"}


def test_api_values_and_defaults():
    assert parse_server_options({}, ALICE).partition == "gpu"
    assert parse_server_options({"gpus": 1}, ALICE).gpus == 1
    assert default_options(ALICE).gpus == 1
    assert default_options(BOB).gpus == 0


@pytest.mark.parametrize(("limits", "fields", "field", "words"), [
    (BOB, {"gpus": 1}, "gpus", "your GPU quota is 0"),
    (ALICE, {"gpus": 4}, "gpus", "allowed: 0-3"),  # quota 4, but only 3 free
    (ALICE, {"gpus": -1}, "gpus", "-1 is out of range; allowed: 0-3"),
    (ALICE, {"gpus": "two"}, "gpus", "not a whole number"),
    (ALICE, {"gpus": "1.5"}, "gpus", "not a whole number"),
    (ALICE, {"cpus": 0}, "cpus", "allowed: 1-8"),
    (ALICE, {"memory_gb": 100}, "memory_gb", "allowed: 1-19"),
    (ALICE, {"runtime": "1:00; rm -rf /"}, "runtime", "HH:MM:SS"),
    (ALICE, {"runtime": "00:00:00"}, "runtime", "longer than"),
    (ALICE, {"partition": "debug", "runtime": "02:00:00"}, "partition debug", "up to 01:00:00"),
    (ALICE, {"partition": "nope"}, "partition", "allowed: gpu, debug"),
    (ALICE, {"partition": "gpu --uid=0"}, "partition", "not a partition"),
    (ALICE, {"options": "--uid=0"}, "options", "unknown field"),
])
def test_bad_values_are_refused_with_the_field_and_what_is_allowed(limits, fields, field, words):
    with pytest.raises(OptionsError) as err:
        parse_server_options(form(**fields), limits)
    assert field in str(err.value) and words in str(err.value)


def test_a_field_sent_twice_is_refused():
    with pytest.raises(OptionsError, match="gpus: expected one value"):
        parse_server_options({"gpus": ["1", "2"]}, ALICE)


def test_no_partition_up():
    with pytest.raises(OptionsError, match="no partitions"):
        parse_server_options({}, ClusterLimits(partitions=(), gpu_quota=4))


def test_form_shows_limits_and_escapes_names():
    odd = Partition('<b>"x"', 2, 4096, 0, 0)
    html = render_form(ClusterLimits(partitions=(GPU, odd), gpu_quota=4))
    assert 'name="gpus"' in html and 'max="3"' in html
    assert "<b>" not in html and "&lt;b&gt;" in html
    assert 'value="gpu" selected' in html


def test_time_limits_read_as_people_say_them():
    assert [describe_minutes(m) for m in (None, 7 * 1440, 60, 90, 1)] == [
        "no time limit", "7 days", "1 hour", "90 minutes", "1 minute"]
    assert "up to 7 days" in render_form(ALICE)
