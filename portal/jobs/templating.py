"""The job templates (`portal/jobs/templates/<kind>.sbatch`, `<kind>.local.sh`): one file per job kind, filled
from a validated spec, like Open OnDemand's submit templates. Plain text, so no HTML escaping; two filters quote
what reaches the script."""

from __future__ import annotations

import shlex
from functools import lru_cache
from pathlib import Path

import jinja2

TEMPLATES_DIR = Path(__file__).parent / "templates"


def sbatch_value(value: object) -> str:
    """A value for an #SBATCH line. sbatch parses those lines itself (double quotes only, no shell), so only
    values that need no quoting at all are written; the validated spec and config never produce others."""
    text = str(value)
    if not text or shlex.quote(text) != text:
        raise ValueError(f"{text!r} cannot be written on an #SBATCH line (it would need quoting)")
    return text


@lru_cache(maxsize=1)
def template_environment() -> jinja2.Environment:
    # StrictUndefined: a template that names a value the renderer did not pass fails, never renders blank.
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES_DIR), autoescape=False,
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    env.filters["q"] = lambda value: shlex.quote(str(value))
    env.filters["sbatch"] = sbatch_value
    return env
