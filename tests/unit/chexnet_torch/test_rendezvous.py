"""Each PyTorch rank's process group meets in a FileStore in the job's private rendezvous directory
(chexnet_torch.rendezvous), named after its run, and refuses a directory that others could enter or that is not one."""

from __future__ import annotations

import os

import pytest

from chexnet_torch.rendezvous import ENV, RendezvousError, init_method, private_directory


def test_a_rank_meets_in_a_file_store_named_after_its_run(tmp_path):
    private = tmp_path / "meet"
    private.mkdir(mode=0o700)
    found = init_method({ENV: str(private), "TORCHELASTIC_RUN_ID": "k8s-3-2", "TORCHELASTIC_RESTART_COUNT": "0"})
    assert found == f"file://{private}/k8s-3-2.0.group"
    hostile = init_method({ENV: str(private), "TORCHELASTIC_RUN_ID": "../../x y"})
    assert hostile == f"file://{private}/.._.._x_y.0.group"  # a name, never a path out of the directory
    assert init_method({}) is None  # run by hand: torch's own env://


@pytest.mark.parametrize("case", ["open", "link", "file", "relative", "missing"])
def test_a_rank_refuses_a_directory_others_could_enter(tmp_path, case):
    target = tmp_path / "meet"
    target.mkdir(mode=0o700)
    given = str(target)
    if case == "open":
        target.chmod(0o750)
    elif case == "link":
        given = str(tmp_path / "link")
        os.symlink(target, given)
    elif case == "file":
        given = str(tmp_path / "plain")
        open(given, "w").close()
    elif case == "relative":
        given = "meet"
    else:
        given = str(tmp_path / "nowhere")
    with pytest.raises(RendezvousError, match=ENV):
        init_method({ENV: given})
    if case == "open":
        with pytest.raises(RendezvousError, match="mode 0750"):
            private_directory(target)
