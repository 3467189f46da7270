"""--pipeline names what the pipeline does (parallel, sequential); the old names by age (new, old) still work, with a
warning on stderr that names the new one."""

from __future__ import annotations

import pytest

from programkit.cli import InputFlags, OneLineParser, UsageError
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
