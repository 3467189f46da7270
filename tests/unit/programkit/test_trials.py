"""A sweep's trial as each program takes it (programkit.trials): the common hyperparameters and the program's own
declared fields, each of its type; a parameter the program has not, or a file that is no trial's, refused in one
line naming --trial."""

from __future__ import annotations

import dataclasses
import json

import pytest

from chexnet import program as chexnet_program
from chexnet.train_args import TrainConfig
from chexnet_torch import program as torch_program
from chexnet_torch.args import TorchConfig
from programkit.cli import UsageError
from programkit.trials import COMMON, param_types, trial_params

FIELDS = [{"name": "model", "kind": "choice"}, {"name": "amp", "kind": "choice"}, {"name": "depth", "kind": "int"},
          {"name": "fused", "kind": "bool"}]


def trial_file(tmp_path, params):
    path = tmp_path / "trial.json"
    path.write_text(json.dumps({"number": 3, "task": 1, "params": params}))
    return path


def test_a_trial_sets_the_common_hyperparameters_and_the_programs_own_fields_each_of_its_type(tmp_path):
    params = {"lr": 0.01, "batch_size": 16, "model": "tinycnn", "amp": "bf16", "depth": 3, "fused": True}
    assert trial_params(trial_file(tmp_path, params), FIELDS) == params
    assert isinstance(trial_params(trial_file(tmp_path, {"lr": 1}), FIELDS)["lr"], float)


@pytest.mark.parametrize(("content", "words"), [
    ({"number": 3, "task": 1, "params": {"fp16": True}}, "fp16 is not a parameter of this program; its parameters: "
                                                         "lr, warmup_epochs, batch_size, image_size, model, amp"),
    ({"number": 3, "task": 1, "params": {"depth": "three"}}, "not a sweep's trial file (ValueError"),
    ({"number": 3, "params": {}}, "not a sweep's trial file (SchemaError"),
    ("[", "not a sweep's trial file (JSONDecodeError"),
])
def test_what_the_program_cannot_take_is_one_line_naming_the_file(tmp_path, content, words):
    path = tmp_path / "trial.json"
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    with pytest.raises(UsageError, match=r"^--trial \S+trial\.json: ") as raised:
        trial_params(path, FIELDS)
    assert words in str(raised.value)


@pytest.mark.parametrize(("declared", "config"), [(chexnet_program, TrainConfig), (torch_program, TorchConfig)])
def test_every_parameter_a_programs_sweep_may_search_is_a_field_of_its_config(declared, config):
    names = {field.name for field in dataclasses.fields(config)}
    assert set(COMMON) <= set(param_types(declared.FIELDS)) <= names
