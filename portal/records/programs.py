"""The training programs the portal can run, each one registered thing (the seam for training programs).

A program is a package of its own (`chexnet/`: TensorFlow + Horovod; `chexnet_torch/`: PyTorch DDP) with a
declaration module, `<package>/program.py`, of plain values and no import of the portal (programs never import
the hub side):

    NAME = "chexnet-torch"                  # what a job's `template` field names
    TITLE, DESCRIPTION                      # shown in the form beside the choice: a few words, one line
    MODULE = "chexnet_torch.train"          # run as `python -m MODULE` (by the launcher below); ".train" or "."
                                            # name a module of the declaration's own package
    LAUNCHER = "torchrun"                   # how it starts on each scheduler: a registered launcher's name
                                            # (portal.records.launchers: "horovod", "torchrun")
    VENV = "torch-venv"                     # its environment: beside the portal's venv (or an absolute path);
                                            # "" = the portal's own venv
    FIELDS = ({"name": "model", "kind": "choice", "choices": (...), "default": "densenet121", "label": ...,
               "help": ...}, {"name": "amp", ...}, ...)  # its fields: kind "choice", "bool" or "int" (low, high);
                                            # a sweep may search each (portal.records.sweep.params_of)
    ARGS_TEMPLATE = "args.sh"               # in TEMPLATES: a Jinja fragment setting the bash array `train_args`

What every program writes for the portal is the same: the per-epoch record `<checkpoint-dir>/epochs.jsonl` (and
its `dsportal.epoch` lines in the output), TensorBoard's tags and the model card, with the program kit (programkit/:
tblog, schemas, model_card, runlines, trials, wrapup). The launchers' job scripts
(portal/records/templates/<launcher>.<scheduler file>) start any program's MODULE with its `train_args`; a program
needs nothing else of the portal.

Registering one is one line: its declaration module in `REGISTERED` below (a test adds one there, and clears
`_registered`'s cache: the registry is loaded once), or a site's own, outside the portal's package, in the setting
`site_programs`, after these (portal.config_programs; docs/admin-guide.md, "A site's own training program").
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from portal.config_programs import MODULE_NAME
from portal.errors import Misconfigured
from portal.records.launchers import launchers, own_package_name
from portal.records.site import site_modules

# The one registration of each program: its declaration module.
REGISTERED = ("chexnet.program", "chexnet_torch.program")
# A program's NAME: a letter, then lower-case ASCII letters, digits and '-' (a job's `template`, its Slurm job name, the
# first word of its launchers' lines, which portal.scheduler.kubernetes.records reads by this pattern).
NAME_PATTERN = r"[a-z][a-z0-9-]{0,62}"
KINDS = ("choice", "bool", "int")
COMMON_OPTIONS = ("model",)  # program fields that JobSpec holds as attributes of its own (every program has a model)
LEGACY_OPTIONS = ("fp16", "xla")  # chexnet's fields, JobSpec attributes since before programs were registered


class ProgramError(Misconfigured, ValueError):
    """A declaration module that is missing or not as this module's docstring says; names the module."""


@dataclass(frozen=True)
class ProgramField:
    """One field of a program's spec, as its declaration gives it: a choice, a switch or a whole number."""

    name: str
    kind: str
    default: Any
    label: str
    help: str = ""
    choices: tuple[str, ...] = ()
    low: int = 0
    high: int = 0


@dataclass(frozen=True)
class Program:
    """A registered training program (see the module's docstring)."""

    name: str
    title: str
    description: str
    module: str
    launcher: str
    venv: str
    fields: tuple[ProgramField, ...]
    templates: Path
    args_template: str

    def field(self, name: str) -> ProgramField | None:
        return next((f for f in self.fields if f.name == name), None)

    @property
    def models(self) -> tuple[str, ...]:
        model = self.field("model")
        return model.choices if model else ()

    def environment(self, portal_venv: Path) -> Path:
        """The venv that runs it: its own (beside the portal's venv unless absolute), else the portal's."""
        if not self.venv:
            return Path(portal_venv)
        return Path(self.venv) if Path(self.venv).is_absolute() else Path(portal_venv).parent / self.venv

    def python(self, portal_venv: Path) -> str:
        return str(self.environment(portal_venv) / "bin" / "python")

    def bin_dir(self, portal_venv: Path) -> str:
        return str(self.environment(portal_venv) / "bin")

    def include(self) -> str:
        """Its argument fragment's name for the job scripts' `{% include %}` (portal.records.templating)."""
        return f"{self.name}/{self.args_template}"


def _text(module: str, values: Mapping[str, Any], name: str, allow_empty: bool = False) -> str:
    value = values.get(name)
    if not isinstance(value, str) or not (value or allow_empty) or "\n" in value:
        raise ProgramError(f"training program {module}: {name} must be a one-line string")
    return value


def _field(module: str, raw: Any) -> ProgramField:
    if not isinstance(raw, Mapping):
        raise ProgramError(f"training program {module}: each of FIELDS must be a mapping")
    name = _text(module, raw, "name")
    where = f"training program {module}: field {name}"
    if not name.isidentifier() or not name.islower():
        raise ProgramError(f"{where}: a field's name is lower-case letters, digits and _")
    kind = raw.get("kind")
    if kind not in KINDS:
        raise ProgramError(f"{where}: kind must be one of {', '.join(KINDS)}")
    made = ProgramField(name, kind, raw.get("default"), _text(module, raw, "label"),
                        _text(module, raw, "help", allow_empty=True) if "help" in raw else "",
                        tuple(raw.get("choices", ())), int(raw.get("low", 0)), int(raw.get("high", 0)))
    if kind == "choice" and (not made.choices or made.default not in made.choices
                             or not all(isinstance(c, str) and c for c in made.choices)):
        raise ProgramError(f"{where}: a choice needs choices (strings) and a default among them")
    if kind == "bool" and not isinstance(made.default, bool):
        raise ProgramError(f"{where}: a switch's default is true or false")
    if kind == "int" and not (type(made.default) is int and made.low <= made.default <= made.high):
        raise ProgramError(f"{where}: a whole number needs low <= default <= high")
    return made


def _module(module_name: str, values: Mapping[str, Any], package: str) -> str:
    """MODULE, a relative name (".train", ".") resolved against the declaration's package."""
    module = _text(module_name, values, "MODULE")
    resolved = own_package_name(module, package)
    if not MODULE_NAME.fullmatch(resolved):
        raise ProgramError(f"training program {module_name}: MODULE {module[:60]!r} is not a module's name")
    return resolved


def load_program(module_name: str) -> Program:
    """The program that `module_name` declares; ProgramError saying what is wrong with it."""
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise ProgramError(f"training program {module_name} cannot be imported: {err}") from None
    values = vars(module)
    name = _text(module_name, values, "NAME")
    if not re.fullmatch(NAME_PATTERN, name):
        raise ProgramError(f"training program {module_name}: NAME is lower-case letters, digits and - (a letter first, "
                           "63 at most)")
    launcher = _text(module_name, values, "LAUNCHER")
    if launcher not in launchers().names:
        raise ProgramError(f"training program {module_name}: LAUNCHER {launcher!r} is not a registered launcher "
                           f"({', '.join(launchers().names)}: portal.records.launchers, site_launchers)")
    fields = tuple(_field(module_name, raw) for raw in values.get("FIELDS", ()))
    if "model" not in (f.name for f in fields):
        raise ProgramError(f"training program {module_name}: FIELDS must declare its models (a choice named model)")
    templates = Path(values.get("TEMPLATES") or Path(module.__file__ or "").parent / "templates")
    args_template = _text(module_name, values, "ARGS_TEMPLATE")
    if not (templates / args_template).is_file():
        raise ProgramError(f"training program {module_name}: {templates / args_template} is not a file")
    return Program(name=name, title=_text(module_name, values, "TITLE"),
                   description=_text(module_name, values, "DESCRIPTION"),
                   module=_module(module_name, values, module.__package__ or ""),
                   launcher=launcher, venv=_text(module_name, values, "VENV", allow_empty=True), fields=fields,
                   templates=templates, args_template=args_template)


@dataclass(frozen=True)
class Registry:
    """The registered programs, by name, in registration order (the first is a job's default)."""

    programs: tuple[Program, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.programs)

    @property
    def default(self) -> Program:
        return self.programs[0]

    def get(self, name: str) -> Program:
        found = next((p for p in self.programs if p.name == name), None)
        if found is None:
            raise KeyError(name)
        return found

    def option_names(self) -> tuple[str, ...]:
        """Every program's own field names (those that JobSpec does not hold as attributes), once each."""
        return tuple(dict.fromkeys(f.name for p in self.programs for f in p.fields
                                   if f.name not in (*COMMON_OPTIONS, *LEGACY_OPTIONS)))


def registry_of(modules: Iterable[str]) -> Registry:
    programs = tuple(load_program(module) for module in modules)
    if not programs:
        raise ProgramError("no training program is registered")
    names = [p.name for p in programs]
    if len(set(names)) != len(names):
        raise ProgramError(f"two training programs have the same NAME: {', '.join(names)}")
    return Registry(programs)


@lru_cache(maxsize=1)
def _registered() -> Registry:
    return registry_of((*REGISTERED, *site_modules("site_programs")))


def registry() -> Registry:
    """The registered programs (`REGISTERED`), loaded once."""
    return _registered()
