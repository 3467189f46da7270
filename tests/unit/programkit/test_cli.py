"""The programs' shared command line: --pipeline names what the pipeline does (parallel, sequential; the old names by
age, new and old, still work, with a warning on stderr that names the new one), and the training flags every program
takes (TrainFlags) are checked once."""

from __future__ import annotations

import pytest

from chexnet.train_args import TrainConfig
from chexnet_torch.args import TorchConfig
from programkit.cli import InputFlags, OneLineParser, TrainFlags, UsageError
from programkit.reference import PIPELINE_OLD_NAMES, PIPELINES


def parsed(tmp_path, *args: str) -> InputFlags:
    parser = OneLineParser(prog="python -m chexnet.train")
    InputFlags.add_input_arguments(parser)
    a = parser.parse_args(["--data-dir", str(tmp_path), *args])
    flags = InputFlags(data_dir=a.data_dir, image_size=a.image_size, model=a.model, pipeline=a.pipeline)
    flags.check_inputs()
    return flags


def test_the_pipelines_are_named_by_what_they_do(tmp_path, capsys):
    assert PIPELINES == ("parallel", "sequential")
    assert parsed(tmp_path).pipeline == "parallel"  # what training uses
    assert parsed(tmp_path, "--pipeline", "sequential").pipeline == "sequential"
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(("old", "new"), sorted(PIPELINE_OLD_NAMES.items()))
def test_an_old_name_still_works_with_a_warning_naming_the_new_one(tmp_path, capsys, old, new):
    assert parsed(tmp_path, "--pipeline", old).pipeline == new
    assert capsys.readouterr().err == f"warning: --pipeline {old} is deprecated; it is now called --pipeline {new}\n"


def test_an_unknown_name_is_refused_with_the_allowed_ones(tmp_path):
    with pytest.raises(UsageError, match="--pipeline must be one of parallel, sequential; got 'fast'"):
        parsed(tmp_path, "--pipeline", "fast")


def trained(tmp_path, *args: str) -> TrainFlags:
    parser = OneLineParser(prog="python -m some.program")
    TrainFlags.add_train_arguments(parser, worker="process")
    flags = TrainFlags(**TrainFlags.train_values(parser.parse_args(
        ["--data-dir", str(tmp_path), "--logdir", "L", "--checkpoint-dir", "C", *args])))
    flags.check_training()
    return flags


@pytest.mark.parametrize(("args", "said"), [
    (("--epochs", "0"), "--epochs must be a positive integer (>= 1); got 0"),
    (("--batch-size", "-1"), "--batch-size must be a positive integer (>= 1); got -1"),
    (("--model", "vgg16"), "--model must be one of"),
    (("--progress", "dots"), "--progress must be one of auto, bar, epoch; got 'dots'"),
    (("--lr", "0"), "--lr must be a positive number; got 0.0"),
    (("--warmup-epochs", "-1"), "--warmup-epochs must be >= 0; got -1"),
    (("--epochs", "two"), "argument --epochs: invalid int value: 'two'"),
])
def test_every_programs_training_flags_are_checked_once_in_the_kit(tmp_path, args, said):
    """Each program's config extends TrainFlags (chexnet's, chexnet-torch's, the toy's in tests/): the flags every
    program takes, parsed and refused in one line naming the flag, the same for each."""
    with pytest.raises(UsageError) as err:
        trained(tmp_path, *args)
    assert said in str(err.value)
    flags = trained(tmp_path, "--epochs", "3", "--resume", "--trial", "t.json")
    assert (flags.epochs, flags.resume, str(flags.trial), flags.lr, flags.progress) == (3, True, "t.json", 1e-3, "auto")
    assert issubclass(TrainConfig, TrainFlags) and issubclass(TorchConfig, TrainFlags)
