"""A PyTorch job's ranks meet only where its owner can write: every torchrun script of every scheduler (a job, a
sweep's trial, a Kubernetes node and worker) gives torchrun a FileStore in a directory only the owner can enter and
no TCP rendezvous; the scripts' helper (torchrun-rendezvous.sh) makes that directory 700 and refuses one that is a
link or another user's. docs/security.md says why: torch's TCPStore has no authentication and torchrun's agents
unpickle what its rendezvous holds. Each rank's own check: tests/unit/chexnet_torch/test_rendezvous.py."""

from __future__ import annotations

import os
import stat
import subprocess

import pytest

from portal.config import PortalConfig
from portal.records.sweep import parse_sweep
from portal.records.templating import template_environment
from portal.scheduler.kubernetes.jobs import job_objects
from portal.scheduler.kubernetes.manifests import sweep_job_manifest
from portal.scheduler.local import render_local
from portal.scheduler.slurm.sbatch import render_sbatch
from tests.unit.helpers import K8S_CFG, K8S_JOB_ID, k8s_spec

CFG = PortalConfig()
PLAN = parse_sweep({"trials": 2, "parallel": 1, "space": {"lr": [0.001, 1e-8]}}, 4, None, 0)
TCP_RENDEZVOUS = ("--standalone", "is_host", "--master-port", "--master-addr", "MASTER_PORT", ":29400")


def torchrun_scripts() -> dict[str, str]:
    """Every script that starts torchrun, by where it runs."""
    spec = k8s_spec(template="chexnet-torch", nodes=2)
    record, _policy, workers = job_objects(K8S_CFG, spec, K8S_JOB_ID, "alice", "v100", plain=True)
    trial = sweep_job_manifest(k8s_spec(template="chexnet-torch"), PLAN, K8S_JOB_ID, "alice", K8S_CFG, "v100")

    def command(job: dict) -> str:
        return job["spec"]["template"]["spec"]["containers"][0]["command"][2]
    return {"slurm job": render_sbatch(spec, "/home/alice/jobs/%j", CFG, "gpu"),
            "slurm sweep": render_sbatch(spec, "/home/alice/jobs/%A", CFG, "gpu", plan=PLAN),
            "local job": render_local(spec, "/home/alice/jobs/local-1", CFG),
            "kubernetes node 0": command(record), "kubernetes worker": command(workers),
            "kubernetes trial": command(trial)}


@pytest.mark.parametrize("where", sorted(torchrun_scripts()))
def test_every_torchrun_script_meets_in_a_private_file_store_and_on_no_port(where):
    text = torchrun_scripts()[where]
    assert "private_rendezvous() {" in text and '"${rendezvous[@]}"' in text, where
    called = text.find('private_rendezvous "', text.index("private_rendezvous() {"))  # defined, then called,
    assert 0 < called < text.rindex('"${rendezvous[@]}"'), where  # before torchrun runs with its flags
    for word in TCP_RENDEZVOUS:
        assert word not in text, (where, word)


def helper(directory: str, run: str = "r1") -> subprocess.CompletedProcess:
    """The scripts' helper, run by bash on `directory`; prints what it exported and set."""
    text = template_environment().get_template("torchrun-rendezvous.sh").render(program={"name": "chexnet-torch"})
    probe = text + f'''
private_rendezvous {directory!r} {run!r} || exit 7
echo "dir=$DSPORTAL_RENDEZVOUS_DIR share=$TORCH_DISABLE_SHARE_RDZV_TCP_STORE"
printf '%s\\n' "${{rendezvous[@]}}"
'''
    return subprocess.run(["bash", "-c", probe], capture_output=True, text=True, timeout=30)


def test_the_helper_makes_the_directory_closed_to_others_and_names_the_run(tmp_path):
    made = tmp_path / "job" / ".rendezvous"
    made.parent.mkdir()
    done = helper(str(made), "77-0")
    assert done.returncode == 0, done.stderr
    assert stat.S_IMODE(made.stat().st_mode) == 0o700
    assert done.stdout.splitlines() == [f"dir={made} share=1", "--rdzv-backend=c10d", "--rdzv-conf=store_type=file",
                                        f"--rdzv-endpoint={made}/77-0.store", "--rdzv-id=77-0"]
    made.chmod(0o755)  # one left open (by hand, or an older portal) is closed again
    assert helper(str(made)).returncode == 0 and stat.S_IMODE(made.stat().st_mode) == 0o700


def test_the_helper_refuses_a_link_and_another_users_directory(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    elsewhere.chmod(0o777)
    link = tmp_path / "link"
    link.symlink_to(elsewhere)
    refused = helper(str(link))
    assert refused.returncode == 7 and f"{link} is not a directory of this user's own" in refused.stderr
    assert stat.S_IMODE(elsewhere.stat().st_mode) == 0o777  # not touched through the link
    if os.geteuid() == 0:  # root can make a directory that belongs to someone else
        theirs = tmp_path / "theirs"
        theirs.mkdir()
        os.chown(theirs, 4242, 4242)
        refused = helper(str(theirs))
        assert refused.returncode == 7 and "not a directory of this user's own" in refused.stderr


def test_a_single_pods_ranks_talk_over_its_own_loopback():
    """On Kubernetes a pod's loopback is its own: one pod's ranks (a trial, a 1-node job) keep gloo there. Several
    pods' ranks must use the pod network; a Slurm node's loopback is every job's, so nothing is gained there."""
    scripts = torchrun_scripts()
    assert "export GLOO_SOCKET_IFNAME=lo" in scripts["kubernetes trial"]
    record, *_ = job_objects(K8S_CFG, k8s_spec(template="chexnet-torch", nodes=1), K8S_JOB_ID, "alice", "v100",
                             plain=True)
    assert "export GLOO_SOCKET_IFNAME=lo" in record["spec"]["template"]["spec"]["containers"][0]["command"][2]
    for where in ("kubernetes node 0", "kubernetes worker", "slurm job", "local job"):
        assert "GLOO_SOCKET_IFNAME" not in scripts[where], where
