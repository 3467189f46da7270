"""The shared input grammar (portal.inputs) and the dashboard's two readers of request bodies: one test per class of
hostile input named in issue 11, and generated bodies for the JSON reader and the HTML form."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from portal.inputs import (
    MAX_BODY_BYTES,
    MAX_JSON_DEPTH,
    MAX_PATH,
    SHOWN_CHARS,
    InputError,
    decode_form,
    json_depth,
    read_json_object,
    shown,
    text,
    wall_time,
    whole_number,
)
from portal.records.spec import FIELDS
from portal.service.api import posted_spec
from portal.service.base import UserError
from portal.service.pages import tail_lines
from portal.service.submit_form import SWEEP_FORM, form_spec

# Digits that str.isdigit() and the regex \d take, and int() reads: Arabic-Indic, Devanagari, full-width, and a
# superscript (isdigit() is True, int() fails).
NON_ASCII_DIGITS = ("٣", "४", "３", "²", "１２", "0٣")
MAX_MESSAGE = 600  # no refusal is longer than this, whatever was sent


# --- the classes of issue 11 ---

@pytest.mark.parametrize("digits", NON_ASCII_DIGITS)
def test_non_ascii_digits_are_not_numbers_nor_wall_times(digits):
    with pytest.raises(InputError, match="is not a whole number"):
        whole_number(digits, "gpus", 0, 10**9)
    with pytest.raises(InputError, match="is not a wall time"):
        wall_time(f"{digits}:00:00", "runtime", None)
    with pytest.raises(InputError, match="tail"):
        try:
            tail_lines(digits)
        except UserError as err:  # the page handler's error: a 400 naming the field
            assert (err.status_code, err.field) == (400, "tail")
            raise InputError(err.field, err.message) from None
    assert whole_number(" 12 ", "gpus", 0, 99) == 12 and wall_time("01:30:00", "runtime", 120) == "01:30:00"


def test_a_long_value_is_refused_by_its_length_and_echoed_as_a_prefix():
    huge = "/" + "a" * 140_000
    with pytest.raises(InputError) as err:
        text(huge, "data_dir", MAX_PATH, "allowed: a path")
    assert "at most 4096 characters" in str(err.value) and "(140001 characters)" in str(err.value)
    assert len(str(err.value)) < MAX_MESSAGE
    with pytest.raises(InputError) as err:
        whole_number("1" * 1_000_000, "epochs", 1, 10)
    assert len(str(err.value)) < MAX_MESSAGE


def test_shown_cuts_every_kind_of_value():
    assert shown("short") == "'short'"
    assert shown("x" * 1000) == f"{'x' * SHOWN_CHARS!r}... (1000 characters)"
    assert shown(b"\xff" * 100).endswith("... (100 bytes)")
    assert shown(10**5000) == f"a {(10**5000).bit_length()}-bit number"
    assert (shown([1] * 10**5), shown({"a": 1}), shown(None), shown(True)) == (
        "a list of 100000 item(s)", "an object of 1 field(s)", "None", "True")


def test_invalid_utf8_in_a_form_is_a_refusal_naming_the_field():
    with pytest.raises(InputError) as err:
        form_spec({"epochs": [b"\xff\xfe1"], "_xsrf": [b"token"]})
    assert err.value.field == "epochs" and "not valid UTF-8" in str(err.value)


def test_unknown_form_fields_are_refused_and_xsrf_is_the_forms_own():
    with pytest.raises(InputError) as err:
        form_spec({"epochs": [b"1"], "partition": [b"gpu"], "_xsrf": [b"t"]})
    assert err.value.field == "partition" and "unknown field; allowed fields: template" in str(err.value)
    with pytest.raises(InputError) as err:
        form_spec({"epochs": [b"1"], "x" * 10_000: [b""]})
    assert err.value.field == "spec" and len(str(err.value)) < MAX_MESSAGE
    assert form_spec({"epochs": [b" 3 "], "nodes": [b""], "_xsrf": [b"t"]}) == {"epochs": "3", "fp16": False,
                                                                                 "xla": False, "mail": False}


def test_a_form_field_sent_twice_or_no_field_at_all_is_refused():
    with pytest.raises(InputError, match="epochs: sent 2 times"):
        form_spec({"epochs": [b"1", b"2"]})
    with pytest.raises(InputError, match="^template: no field was sent"):
        form_spec({"_xsrf": [b"t"]})


@pytest.mark.parametrize("body", [None, b"", b"  \n", b"{}"])
def test_an_empty_post_to_the_jobs_api_submits_nothing(body):
    with pytest.raises(InputError) as err:
        posted_spec(body)
    assert err.value.field == "template" and '{"template": "chexnet"}' in str(err.value)
    assert posted_spec(b'{"template": "chexnet"}') == {"template": "chexnet"}


def test_json_bodies_are_capped_in_size_and_depth_and_must_be_objects():
    deep = b"[" * 30_000 + b"]" * 30_000  # within the size cap; json.loads alone would raise RecursionError
    with pytest.raises(InputError, match="nests deeper than 8 levels"):
        read_json_object(b"[" * 100_000 + b"]" * 100_000, "spec", max_bytes=10**6)
    for body, words in ((deep, "nests deeper than"), (b" " * (MAX_BODY_BYTES + 1), "allowed: a JSON object of at most"),
                        (b'{"a": "\xff"}', "not valid UTF-8"), (b"[1]", "not an object"), (b'"x"', "not an object"),
                        (b"1" * 5000, "not JSON"), (b"{", "not JSON"), (b'{"a": ' + b"1" * 5000 + b"}", "not JSON")):
        with pytest.raises(InputError) as err:
            read_json_object(body, "spec")
        assert err.value.field == "spec" and words in str(err.value), str(err.value)
        assert len(str(err.value)) < MAX_MESSAGE


def test_json_depth_counts_brackets_outside_strings():
    assert json_depth('{"a": [[1]], "b": "[[[[[[[[[[[[[[[[[[[[\\"[[["}') == 3
    assert read_json_object(json.dumps({"a": "[" * 1000}).encode(), "spec") == {"a": "[" * 1000}
    nested = json.dumps({"a": [[[[[[[1]]]]]]]}).encode()  # depth 8: the most a body may nest
    assert json_depth(nested.decode()) == MAX_JSON_DEPTH and read_json_object(nested, "spec")


def test_decode_form_refuses_a_field_sent_many_times():
    with pytest.raises(InputError, match="gpus: sent 5 times; allowed: once"):
        decode_form({"gpus": [b"1"] * 5}, ("gpus",), "options")


# --- generated bodies: a result within the bounds, or the field error; never another exception ---

JSON_SCALARS = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=50) | st.sampled_from(
    NON_ASCII_DIGITS)
JSON_VALUES = st.recursive(JSON_SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
    st.text(max_size=10), inner, max_size=4), max_leaves=20)
FIELD_NAMES = st.sampled_from((*FIELDS, *SWEEP_FORM, "partition", "_xsrf", "gpus")) | st.text(max_size=80)


def nested(depth: int) -> bytes:
    return (b'{"a":' * depth) + b"1" + (b"}" * depth)


BODIES = st.one_of(
    st.binary(max_size=200),
    st.dictionaries(FIELD_NAMES, JSON_VALUES, max_size=6).map(lambda d: json.dumps(d).encode()),
    JSON_VALUES.map(lambda v: json.dumps(v).encode()),
    st.integers(1, 3000).map(nested),
    st.integers(MAX_BODY_BYTES - 10, MAX_BODY_BYTES + 10).map(lambda n: b'{"data_dir": "' + b"a" * n + b'"}'),
    st.text(max_size=100).map(lambda t: t.encode("utf-8", "surrogatepass")),
)


@settings(max_examples=500, deadline=None)
@given(BODIES)
def test_generated_json_bodies_are_an_object_or_a_refusal_naming_the_body(body):
    try:
        spec = posted_spec(body)
    except InputError as err:
        assert err.field in ("spec", "template") and len(str(err)) < MAX_MESSAGE
        return
    assert isinstance(spec, dict) and spec and len(body) <= MAX_BODY_BYTES and json_depth(body.decode()) <= 8


FORM_VALUES = st.lists(st.binary(max_size=30) | st.text(max_size=30).map(str.encode) | st.sampled_from(
    [d.encode() for d in NON_ASCII_DIGITS]) | st.just(b"a" * (MAX_PATH + 1)), min_size=1, max_size=6)
FORMS = st.dictionaries(FIELD_NAMES, FORM_VALUES, max_size=6)


@settings(max_examples=500, deadline=None)
@given(FORMS)
def test_generated_forms_are_spec_fields_or_a_refusal_naming_a_field(arguments):
    try:
        spec = form_spec(arguments)
    except InputError as err:
        unknown_named = err.field in arguments and err.field not in FIELDS and "unknown field" in err.message
        # The sweep's own fields of the form (sweep_lr_low, ...) are named as themselves (found by hypothesis:
        # "sweep_image_size" sent twice was refused naming it, rightly).
        assert err.field in (*FIELDS, *SWEEP_FORM, "spec") or unknown_named, str(err)
        assert len(str(err)) < MAX_MESSAGE
        return
    assert set(spec) <= set(FIELDS)
    assert all(isinstance(v, bool) or (isinstance(v, str) and len(v) <= MAX_PATH) for v in spec.values())


def test_digits_are_ascii_only_wherever_they_are_checked():
    from portal.config import ConfigError, PortalConfig
    from portal.inputs import ascii_digits
    from portal.scheduler.slurm.json_answers import read_squeue
    from tests.slurm_answers import squeue_job, squeue_json

    assert ascii_digits("0123") and not ascii_digits("") and not ascii_digits("²") and not ascii_digits("٣")
    with pytest.raises(ConfigError, match="k8s_gpu_profiles"):
        PortalConfig(k8s_gpu_profiles=("0", "²"))
    # "²" passed str.isdigit, and int() then raised: an answer of Slurm's whose ids or counts are not whole numbers
    # is read as no job / no node count, never a crash.
    assert read_squeue(squeue_json(squeue_job("²", "alice")), 0) == {}
    assert read_squeue(squeue_json(squeue_job(8, "alice", node_count="²")), 0)["8"].nodes == 0
    assert read_squeue(squeue_json(squeue_job(9, "alice", tres_req_str="gres/gpu=²")), 0)["9"].gpus == 0
