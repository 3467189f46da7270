"""The server options model: every rule of the spawn form, without a scheduler."""

import asyncio
import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jupyterhub.spawner import LocalProcessSpawner
from tornado import web

from portal.quota import GpuQuota
from portal.records.budget import GpuBudget
from portal.records.limits import JobLimits, Pool
from spawners.forms import (
    FIELDS,
    OptionsError,
    ServerOptions,
    default_options,
    describe_minutes,
    form_options,
    minutes_of,
    parse_server_options,
    render_form,
)
from spawners.options import ServerOptionsMixin

GPU = Pool("gpu", cpus_per_node=8, memory_mb_per_node=20000, gpus_per_node=4, free_gpus_per_node=3,
                max_minutes=7 * 1440, default=True)
DEBUG = Pool("debug", cpus_per_node=8, memory_mb_per_node=20000, gpus_per_node=4, free_gpus_per_node=3,
                  max_minutes=60)


def limits_with(pools: tuple, quota: GpuQuota, gpu_choices=None) -> JobLimits:
    """A scheduler's limits with these pools (what the spawn form is a view of): the jobs' fields are no matter
    here."""
    return JobLimits(partition="gpu", nodes=1, gpus_per_node=4, cpus_per_node=8, memory_gb_per_node=19,
                     max_minutes=None, quota=quota, default_data_dir="/data", pools=pools,
                     gpu_choices=gpu_choices)


ALICE = limits_with(pools=(GPU, DEBUG), quota=GpuQuota(4, ("datascientists", "gpu-users")))
BOB = limits_with(pools=(GPU, DEBUG), quota=GpuQuota(0, ("datascientists",)))


def form(**fields):
    """Form data as the hub passes it: every value a list of strings."""
    return {k: [str(v)] for k, v in fields.items()}


def test_form_values_become_typed_options():
    options = form_options(form(partition="debug", gpus=2, cpus=4, memory_gb=8, runtime="00:30:00"), ALICE)
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
        form_options(form(**fields), limits)
    assert field in str(err.value) and words in str(err.value)
    with pytest.raises(OptionsError) as err:
        parse_server_options(fields, limits)  # the same as API data
    assert field in str(err.value) and words in str(err.value)


def test_a_form_field_sent_twice_or_not_as_form_data_is_refused():
    with pytest.raises(OptionsError, match="gpus: sent 2 times; allowed: once"):
        form_options({"gpus": ["1", "2"]}, ALICE)
    with pytest.raises(OptionsError, match="cpus: sent more than 4 times"):
        form_options({"cpus": ["1"] * 1000}, ALICE)
    with pytest.raises(OptionsError, match="runtime: '01:00:00' is not form data"):
        form_options({"runtime": "01:00:00"}, ALICE)


@pytest.mark.parametrize(("field", "value", "words"), [
    ("gpus", [0], "a list of 1 item(s) is not a whole number"),  # the REST API once took this for 0
    ("gpus", ["1"], "is not a whole number"),
    ("cpus", [], "is not a whole number"),
    ("memory_gb", None, "None is not a whole number"),
    ("memory_gb", {"4": 4}, "is not a whole number"),
    ("partition", ["gpu"], "is not text"),
    ("partition", None, "None is not text"),
    ("runtime", ["01:00:00"], "is not a wall time"),
    ("runtime", None, "None is not a wall time"),
])
def test_api_values_are_plain_values_never_a_list_or_null(field, value, words):
    with pytest.raises(OptionsError) as err:
        parse_server_options({field: value}, ALICE)
    assert err.value.field == field and words in err.value.message, str(err.value)


def test_no_partition_up():
    with pytest.raises(OptionsError, match="no partitions"):
        parse_server_options({}, limits_with(pools=(), quota=GpuQuota(4)))


def test_form_shows_limits_and_escapes_names():
    odd = Pool('<b>"x"', 2, 4096, 0, 0)
    html = render_form(limits_with(pools=(GPU, odd), quota=GpuQuota(4)))
    assert 'name="gpus"' in html and 'max="3"' in html
    assert "<b>" not in html and "&lt;b&gt;" in html
    assert 'value="gpu" selected' in html


def test_time_limits_read_as_people_say_them():
    assert [describe_minutes(m) for m in (None, 7 * 1440, 60, 90, 1)] == [
        "no time limit", "7 days", "1 hour", "90 minutes", "1 minute"]
    assert "up to 7 days" in render_form(ALICE)


# --- hostile input (issue 11): ASCII grammar, length caps, short echoes; generated options ---

@pytest.mark.parametrize(("field", "value"), [("gpus", "١"), ("cpus", "２"), ("memory_gb", "٤"),
                                              ("runtime", "٠١:00:00"), ("runtime", "01:００:00")])
def test_non_ascii_digits_are_refused(field, value):
    with pytest.raises(OptionsError) as err:
        parse_server_options({field: value}, ALICE)
    assert err.value.field == field


def test_huge_values_and_keys_are_refused_with_a_short_echo():
    for raw, field in (({"partition": "g" * 140_000}, "partition"), ({"runtime": "1" * 10**6}, "runtime"),
                       ({"k" * 10**6: 1}, "options"), ({"gpus": [[[[1]]]]}, "gpus"), ({"gpus": 10**400}, "gpus")):
        with pytest.raises(OptionsError) as err:
            parse_server_options(raw, ALICE)
        assert err.value.field == field and len(str(err.value)) < 600


VALID_LOOKING = {  # per field: mostly allowed, some just outside the bounds
    "partition": st.sampled_from(["gpu", "debug", " gpu "]),
    "gpus": st.integers(0, 4) | st.sampled_from(["1", " 2 ", "+1"]),
    "cpus": st.integers(0, 9) | st.sampled_from(["2"]),
    "memory_gb": st.integers(0, 20) | st.sampled_from(["4"]),
    "runtime": st.sampled_from(["01:00:00", "00:30:00", " 00:10:00 ", "02:00:00", "168:00:00"]),
}
HOSTILE = (st.integers() | st.text(max_size=20) | st.sampled_from(["٣", "３", "٠١:00:00", "x" * 5000, "1" * 10**5])
           | st.lists(st.text(max_size=5) | st.integers(), max_size=3) | st.none() | st.booleans() | st.floats()
           | st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))


def mostly(valid: st.SearchStrategy) -> st.SearchStrategy:
    """One value in five hostile: enough requests get through every check to test the accepted side too."""
    return st.integers(0, 4).flatmap(lambda n: HOSTILE if n == 0 else valid)


KNOWN_FIELDS = st.fixed_dictionaries({}, optional={name: mostly(valid) for name, valid in VALID_LOOKING.items()})
OPTIONS = st.one_of(KNOWN_FIELDS, KNOWN_FIELDS, KNOWN_FIELDS,
                    st.dictionaries(st.sampled_from(FIELDS) | st.text(max_size=70), HOSTILE, max_size=6))


@settings(max_examples=500, deadline=None)
@given(OPTIONS, st.sampled_from([ALICE, BOB]))
def test_generated_options_are_valid_within_bounds_or_refused_naming_a_field(raw, limits):
    try:
        options = parse_server_options(raw, limits)
    except OptionsError as err:
        assert err.field in (*FIELDS, "options") or (err.field in raw and "unknown field" in err.message), str(err)
        assert len(str(err)) < 600
        return
    assert all(isinstance(value, (str, int)) for value in raw.values())  # never a list, null, float or mapping
    partition = limits.pool(options.partition)
    assert 0 <= options.gpus <= limits.server_gpus(partition) and 1 <= options.cpus <= partition.cpus_per_node
    assert 1 <= options.memory_gb <= partition.memory_mb_per_node // 1024
    assert options.runtime.isascii() and 0 < minutes_of(options.runtime) <= partition.max_minutes


# --- the hub's side (spawners.options): a refusal is a 400 naming the field and keeps the stored options ---

class StoredOptions:
    """What the hub's database row holds for a server (orm.Spawner.user_options); the default server's name."""

    server = None
    name = ""

    def __init__(self, user_options: dict):
        self.user_options = user_options


class FormSpawner(ServerOptionsMixin, LocalProcessSpawner):
    applied: ServerOptions | None = None

    async def limits(self):
        return ALICE

    def apply_server_options(self, options):
        self.user_options = options.to_dict()
        self.applied = options


def spawn_as_the_hub_does(spawner: FormSpawner, options: dict):
    """jupyterhub.user.User.spawn (6.1): store the request's options, hand them over, then apply them."""
    spawner.orm_spawner.user_options = options
    spawner.user_options = options
    asyncio.run(spawner._apply_server_options(spawner.user_options))


def test_refused_options_are_a_400_and_the_options_stored_before_stay(caplog):
    stored = {"partition": "debug", "gpus": 1, "cpus": 2, "memory_gb": 4, "runtime": "00:30:00"}
    spawner = FormSpawner(user_options=stored, orm_spawner=StoredOptions(stored))
    with pytest.raises(web.HTTPError) as err:
        spawn_as_the_hub_does(spawner, {"gpus": "٣"})
    assert err.value.status_code == 400 and err.value.jupyterhub_message.startswith("gpus: '٣' is not a whole")
    assert f"spawn of {spawner._log_name} refused: gpus: '٣' is not a whole" in caplog.text  # the operator's line
    assert spawner.orm_spawner.user_options == stored and spawner.user_options == stored
    spawn_as_the_hub_does(spawner, spawner.orm_spawner.user_options)  # a start without options: the stored ones
    assert spawner.applied == ServerOptions(**stored)


def test_the_form_is_refused_with_a_400_before_the_hub_stores_anything():
    spawner = FormSpawner()
    with pytest.raises(web.HTTPError) as err:
        asyncio.run(spawner.options_from_form({"runtime": ["99:00:00 %d %s"], "_xsrf": ["t"]}))
    assert err.value.status_code == 400 and "runtime:" in err.value.jupyterhub_message
    assert "99:00:00 %d %s" in str(err.value)  # a % in the input is text, not a format
    assert asyncio.run(spawner.options_from_form({"gpus": ["2"], "_xsrf": ["t"]}))["gpus"] == 2


def test_a_default_lowers_to_the_partitions_wall_time_limit():
    """A partition whose limit is shorter than the default wall time still takes a request that names none."""
    assert parse_server_options({"partition": "debug"}, ALICE).runtime == "01:00:00"
    assert parse_server_options({"partition": "gpu"}, ALICE).runtime == ServerOptions("gpu").runtime


def test_a_server_whose_gpus_can_cost_more_than_the_week_leaves_is_refused_naming_runtime():
    """The weekly GPU-hours budget at spawn (docs/gpus.md): GPUs x wall time, as a job's nodes x GPUs x time limit."""
    budgeted = dataclasses.replace(ALICE, budget=GpuBudget(10, 8.0, "Sunday 29 November 00:00"))
    with pytest.raises(OptionsError) as refused:
        parse_server_options({"gpus": 2, "runtime": "01:30:00"}, budgeted)
    assert refused.value.field == "runtime" and str(refused.value.message) == (
        "this server can cost up to 3 GPU-hours (1 node x 2 GPUs x 1 h 30 min), more than 2 of your weekly 10 "
        "GPU-hours left (8 used since Sunday 29 November 00:00); a time limit of at most 01:00:00 (1 h) fits, or "
        "fewer GPUs")
    assert parse_server_options({"gpus": 0, "runtime": "08:00:00"}, budgeted).runtime == "08:00:00"  # no GPU
    assert parse_server_options({"gpus": 1}, budgeted).runtime == "02:00:00"  # the default, lowered to what fits
    page = render_form(budgeted)
    assert 'aria-describedby="ds-budget"' in page and "2 of your weekly 10 GPU-hours left" in page
    spent = dataclasses.replace(ALICE, budget=GpuBudget(10, 10.0, "Sunday 29 November 00:00"))
    assert default_options(spent).gpus == 0  # nothing with GPUs fits: the form offers none first
