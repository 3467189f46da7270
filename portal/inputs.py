"""The input grammar every surface shares: the spawn form and its REST options, the jobs API, the dashboard's HTML
forms, the notebook API and the command line.

Rules, each in one place:
- numbers and wall times are ASCII (`[0-9]`, never `\\d` or `str.isdigit`, which take any Unicode digit: "٣" or
  "３" would pass here and then break the batch script or sbatch);
- every string has a length cap, checked before anything else touches the value (a 140,000-character path
  reached the OS as E2BIG);
- bytes are decoded strictly (invalid UTF-8 is the sender's mistake: a 400 naming the field, not a 500);
- JSON bodies have a size cap and a nesting cap (100,000-deep JSON was a RecursionError), and must be objects;
- every refusal is an `InputError` naming the field and what is allowed, and echoes at most a short prefix of what
  was sent (`shown`): error messages never carry a multi-megabyte body back.

Pure functions: the surfaces turn `InputError` into their own error types (`JobSpecError`, `OptionsError`, a 400).
"""

from __future__ import annotations

import functools
import json
import os
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from portal.errors import Refused

SHOWN_CHARS = 40  # how much of a refused value an error message echoes
LOGGED_REASON_CHARS = 300  # how much of a refusal's reason a log line holds
MAX_NAME = 64  # partitions, models, templates, field names
MAX_PATH = 4096  # PATH_MAX on Linux
MAX_NUMBER_TEXT = 32  # "  +000000123  " and the like; longer is not a number anyone typed
MAX_WALL_TIME_TEXT = 16
MAX_BODY_BYTES = 64 * 1024  # a JobSpec is a few hundred bytes
MAX_JSON_DEPTH = 8  # JobSpecs and server options are flat objects
MAX_FORM_VALUES = 4  # a form field sent more often than this is not a form a person filled in
LARGE_INT_BITS = 64  # beyond this an int is described, not printed (str() of huge ints is slow or refused)

WHOLE_NUMBER = re.compile(r"[+-]?[0-9]{1,9}", re.ASCII)
WALL_TIME = re.compile(r"([0-9]{1,3}):([0-5][0-9]):([0-5][0-9])", re.ASCII)
FIELD_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}", re.ASCII)
WALL_TIME_HTML_PATTERN = "[0-9]{1,3}:[0-5][0-9]:[0-5][0-9]"  # the same grammar for <input pattern=...>
JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
JSON_BRACKET = re.compile(r"[\[\]{}]")


def ascii_digits(text: str) -> bool:
    """Whether `text` is one or more of 0-9. str.isdigit also takes "²" and "٣", which int() then refuses or reads
    as a number nobody typed: every check of digits, in settings and in Slurm's answers alike, goes through here."""
    return text.isascii() and text.isdigit()


class InputError(Refused, ValueError):
    """A value is not allowed. `field` names it; `message` says what is allowed."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def one_line(reason: object, limit: int | None = LOGGED_REASON_CHARS) -> str:
    """A message on one line, for a log line or an error: its lines joined by "; " (a scheduler's message may hold
    several, and a user's text is never let start a line of its own), each one's runs of white space as one space,
    cut to `limit` characters (None: whole, where the caller bounds it)."""
    text = "; ".join(" ".join(line.split()) for line in str(reason).splitlines() if line.strip())
    return text if limit is None or len(text) <= limit else text[:limit] + "..."


def shown(value: object) -> str:
    """A refused value as an error message echoes it: its repr, cut to SHOWN_CHARS, with the full size."""
    if isinstance(value, (str, bytes)):
        if len(value) <= SHOWN_CHARS:
            return repr(value)
        unit = "characters" if isinstance(value, str) else "bytes"
        return f"{value[:SHOWN_CHARS]!r}... ({len(value)} {unit})"
    if isinstance(value, bool) or value is None or isinstance(value, float):
        return repr(value)
    if isinstance(value, int):
        return repr(value) if value.bit_length() <= LARGE_INT_BITS else f"a {value.bit_length()}-bit number"
    if isinstance(value, Mapping):
        return f"an object of {len(value)} field(s)"
    if isinstance(value, (list, tuple)):
        return f"a list of {len(value)} item(s)"
    return f"a {type(value).__name__}"


def field_label(key: object, whole: str) -> str:
    """The field an error about an unknown key names: the key itself when it reads as a field name, else `whole`
    (the request as a whole), so a megabyte-long or binary key never becomes an error's field."""
    return key if isinstance(key, str) and FIELD_NAME.fullmatch(key) else whole


def check_fields(raw: Mapping[Any, Any], allowed: Iterable[str], whole: str) -> None:
    """Refuse a key that is not one of `allowed`, naming it (or `whole`) and listing the fields there are."""
    allowed = tuple(allowed)
    unknown = [key for key in raw if key not in allowed]
    if unknown:
        key = sorted(unknown, key=lambda k: (not isinstance(k, str), str(k)[:MAX_NAME]))[0]
        field = field_label(key, whole)
        said = "unknown field" if field == key else f"unknown field {shown(key)}"
        raise InputError(field, f"{said}; allowed fields: {', '.join(allowed)}")


def text(value: object, field: str, cap: int, allowed: str) -> str:
    """A string of at most `cap` characters; the cap is checked before the value is looked at any further."""
    if not isinstance(value, str):
        raise InputError(field, f"{shown(value)} is not text; {allowed}")
    if len(value) > cap:
        raise InputError(field, f"{shown(value)} is too long (at most {cap} characters); {allowed}")
    return value


def whole_number(value: object, field: str, low: int, high: int, why: str = "") -> int:
    """A whole number in [low, high]: an int, or ASCII digits as text (form fields, command-line flags). Never a
    bool (True is an int in Python) nor a float (2.5 GPUs is a mistake, not a rounding)."""
    span = f"{low}-{high}" if low < high else str(low) if low == high else "none"
    allowed = f"allowed: {span}{why}"
    if isinstance(value, str) and len(value) <= MAX_NUMBER_TEXT and WHOLE_NUMBER.fullmatch(value.strip()):
        value = int(value.strip())
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(field, f"{shown(value)} is not a whole number; {allowed}")
    if not low <= value <= high:
        raise InputError(field, f"{shown(value)} is out of range; {allowed}")
    return value


def minutes_of(wall_time: str) -> int:
    """Minutes of a wall time already checked against WALL_TIME; a started minute counts whole."""
    hours, minutes, seconds = (int(part) for part in WALL_TIME.fullmatch(wall_time).groups())
    return hours * 60 + minutes + (1 if seconds else 0)


def seconds_of(wall_time: str) -> int:
    hours, minutes, seconds = (int(part) for part in WALL_TIME.fullmatch(wall_time).groups())
    return hours * 3600 + minutes * 60 + seconds


def format_minutes(minutes: int | None) -> str:
    if minutes is None:
        return "no limit"
    return f"{minutes // 60:02d}:{minutes % 60:02d}:00"


def wall_time(value: object, field: str, max_minutes: int | None, where: str = "") -> str:
    """HH:MM:SS (hours up to 999), longer than zero and within `max_minutes` (None: no limit)."""
    allowed = f"allowed: HH:MM:SS from 00:00:01 up to {format_minutes(max_minutes)}{where}"
    if not isinstance(value, str) or len(value) > MAX_WALL_TIME_TEXT or not WALL_TIME.fullmatch(value.strip()):
        raise InputError(field, f"{shown(value)} is not a wall time; {allowed}")
    value = value.strip()
    if minutes_of(value) == 0:
        raise InputError(field, f"must be longer than 00:00:00; {allowed}")
    if max_minutes is not None and minutes_of(value) > max_minutes:
        raise InputError(field, f"{value} exceeds the limit; {allowed}")
    return value


def boolean(value: object, field: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and len(value) <= 8 and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise InputError(field, f"{shown(value)} is not a boolean; allowed: true, false")


def choice(value: Any, field: str, offered: Iterable[Any], what: str = "offered", why: str = "") -> Any:
    """One of `offered`, of the same type (never True for 1, nor "1" for 1); refused as "is not `what`"."""
    offered = tuple(offered)
    if not any(type(value) is type(item) and value == item for item in offered):
        raise InputError(field, f"{shown(value)} is not {what}; allowed: {', '.join(map(str, offered))}{why}")
    return value


def absolute_path(value: object, field: str, allowed: str) -> str:
    """An absolute path of at most MAX_PATH characters, without control characters, normalised lexically:
    "/data/../etc" is "/etc" before any check of where it is, so what is checked is what is used."""
    if not isinstance(value, str) or not value.strip():
        raise InputError(field, f"{shown(value)} is not a path; {allowed}")
    text(value, field, MAX_PATH, allowed)  # the cap first: a longer path only comes back from the OS as E2BIG
    if any(ch in value for ch in "\0\n\r"):
        raise InputError(field, f"{shown(value)} contains a control character; {allowed}")
    if not os.path.isabs(value):
        raise InputError(field, f"{shown(value)} is relative; {allowed}")
    path = os.path.normpath(value)
    return "/" + path.lstrip("/") if path.startswith("//") else path  # POSIX keeps a leading "//": the same as "/"


# --- a request as a whole: its fields, and the surface's own error type ---

def fields_of(raw: object, allowed: Iterable[str], whole: str) -> Mapping[Any, Any]:
    """`raw` as a mapping of the `allowed` fields, or the refusal naming `whole` (the request) or the unknown key."""
    allowed = tuple(allowed)
    if not isinstance(raw, Mapping):
        raise InputError(whole, f"expected a mapping of fields, got {shown(raw)}; allowed fields: {', '.join(allowed)}")
    check_fields(raw, allowed, whole)
    return raw


def form_values(formdata: object, allowed: Iterable[str], whole: str) -> dict[str, Any]:
    """An HTML form's data (each field a list of strings, one per time it was sent) as one value per field, the
    shape of API data; a field sent more than once is refused. Only a form's data goes through here: a list in
    API data is never taken for its one item."""
    values = {}
    for field, sent in fields_of(formdata, allowed, whole).items():
        if not isinstance(sent, (list, tuple)):
            raise InputError(field, f"{shown(sent)} is not form data")
        if len(sent) != 1:
            count = len(sent) if len(sent) <= MAX_FORM_VALUES else f"more than {MAX_FORM_VALUES}"
            raise InputError(field, f"sent {count} times; allowed: once")
        values[field] = sent[0]
    return values


Parsed = TypeVar("Parsed")


def refused_as(error_type: type[InputError]) -> Callable[[Callable[..., Parsed]], Callable[..., Parsed]]:
    """A parser whose refusals are the surface's own error type (`OptionsError`, `JobSpecError`), with the field
    and the wording of the grammar here."""
    def decorate(parse: Callable[..., Parsed]) -> Callable[..., Parsed]:
        @functools.wraps(parse)
        def parse_or_refuse(*args: Any, **kwargs: Any) -> Parsed:
            try:
                return parse(*args, **kwargs)
            except error_type:
                raise
            except InputError as err:
                raise error_type(err.field, err.message) from None
        return parse_or_refuse
    return decorate



# --- bytes: form bodies and JSON bodies ---

def decode(data: bytes, field: str) -> str:
    """Strict UTF-8: bytes that are not UTF-8 are refused, never replaced or guessed."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(field, f"{shown(data)} is not valid UTF-8 text; allowed: UTF-8 text") from None


def decode_form(arguments: Mapping[str, list[bytes]], allowed: Iterable[str], whole: str,
                ignored: Iterable[str] = ("_xsrf",), cap: int = MAX_PATH) -> dict[str, list[str]]:
    """A posted form's fields (tornado's body_arguments), decoded strictly: every name must be one of `allowed`
    (or `ignored`: tornado's own `_xsrf`), every value UTF-8 of at most `cap` characters."""
    ignored = tuple(ignored)
    fields = {name: values for name, values in arguments.items() if name not in ignored}
    check_fields(fields, allowed, whole)
    decoded: dict[str, list[str]] = {}
    for name, values in fields.items():
        if len(values) > MAX_FORM_VALUES:
            raise InputError(name, f"sent {len(values)} times; allowed: once")
        decoded[name] = [text(decode(value, name), name, cap, f"allowed: at most {cap} characters")
                         for value in values]
    return decoded


def finite_json(text: str, max_bytes: int, error: type[Exception] = ValueError) -> Any:
    """`json.loads` of a file the portal wrote (a job record, the metrics of a run), without NaN and Infinity, which
    Python's json accepts and none of them holds; `error` saying why for a text over `max_bytes`, or not JSON."""
    if len(text) > max_bytes:
        raise error(f"{len(text)} bytes, more than the {max_bytes} allowed")
    try:
        return json.loads(text, parse_constant=_no_constant)
    except (ValueError, RecursionError) as err:  # RecursionError: very deep nesting
        raise error(f"not JSON ({str(err)[:80]})") from None


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not a number")


def json_depth(body: str) -> int:
    """How deeply a JSON text nests, counted without recursion: brackets outside strings."""
    depth = deepest = 0
    for bracket in JSON_BRACKET.findall(JSON_STRING.sub('""', body)):
        depth += 1 if bracket in "[{" else -1
        deepest = max(deepest, depth)
    return deepest


def read_json_object(body: bytes | None, field: str, max_bytes: int = MAX_BODY_BYTES,
                     max_depth: int = MAX_JSON_DEPTH) -> dict[str, Any]:
    """A request body that must be one JSON object: size, encoding and depth checked before it is parsed.
    An empty body is `{}`; whether that is allowed is the caller's rule."""
    body = body or b""
    if len(body) > max_bytes:
        raise InputError(field, f"the body is {len(body)} bytes; allowed: a JSON object of at most {max_bytes} bytes")
    source = decode(body, field)
    if not source.strip():
        return {}
    if json_depth(source) > max_depth:
        raise InputError(field, f"the body nests deeper than {max_depth} levels; allowed: a flat JSON object")
    try:
        value = json.loads(source)
    except (ValueError, RecursionError) as err:  # ValueError: JSONDecodeError, or an integer of > 4300 digits
        reason = str(err)[:SHOWN_CHARS * 2]
        raise InputError(field, f"the body is not JSON ({reason}); allowed: a JSON object") from None
    if not isinstance(value, dict):
        raise InputError(field, f"the body is {shown(value)}, not an object; allowed: a JSON object of fields")
    return value
