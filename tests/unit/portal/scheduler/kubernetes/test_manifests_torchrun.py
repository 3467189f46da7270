"""A torchrun (PyTorch) job on Kubernetes, built and read without a cluster: node 0's Job (the record, hostname
`<id>-0`), its workers Job, the scripts (a rendezvous in the job's private directory, no port), its state, its sweep
trial, and the dry run; and that a portal of MPIJobs does not offer it."""

from __future__ import annotations

import json

import kubernetes_validate
import pytest

from portal.records.record import RUNNING
from portal.records.spec import JobSpecError
from portal.records.sweep import parse_sweep
from portal.scheduler.kubernetes.jobs import job_objects
from portal.scheduler.kubernetes.manifests import (
    ANNOTATION_SPEC,
    ANNOTATION_TIME_LIMIT,
    ANNOTATION_WORKER_PODS,
    LABEL_JOB,
    LABEL_ROLE,
    STOP_GRACE_S,
    sweep_job_manifest,
)
from portal.scheduler.kubernetes.records import RUN_ENDED, limits_for, plain_job_state
from portal.scheduler.kubernetes.torchjob import ranked_first, torchrun_job_objects
from tests.unit.helpers import K8S_CFG as CFG
from tests.unit.helpers import K8S_JOB_ID as JOB_ID
from tests.unit.helpers import (
    KUBE_ALICE,
    KUBERNETES_VERSIONS,
    bash_syntax_ok,
    in_a_pod,
    k8s_spec,
    plain_job,
    pod_of_job,
    required_apart,
)


def spec(**raw):
    return k8s_spec(template="chexnet-torch", **raw)


def objects(**raw):
    record, owned = torchrun_job_objects(spec(**raw), JOB_ID, "alice", CFG, "v100",
                                         submitted_at="2026-11-29T10:15:00+00:00")
    return record, owned


def script(job: dict) -> str:
    return job["spec"]["template"]["spec"]["containers"][0]["command"][2]


def test_two_nodes_is_node_zeros_job_and_one_worker_pod_and_no_port():
    record, (workers,) = objects(nodes=2, gpus_per_node=4, cpus_per_task=2, memory_gb=64, time_limit="02:00:00")
    assert (record["kind"], record["metadata"]["name"]) == ("Job", JOB_ID)
    assert json.loads(record["metadata"]["annotations"][ANNOTATION_SPEC])["template"] == "chexnet-torch"
    assert record["metadata"]["annotations"][ANNOTATION_WORKER_PODS] == "1"
    node0 = record["spec"]["template"]["spec"]
    # Node 0 trains too: it asks for a node's share, as each worker pod does (the quota counts both).
    for pod in (node0, workers["spec"]["template"]["spec"]):
        assert pod["containers"][0]["resources"]["limits"] == {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "4"}
        assert pod["nodeSelector"] == {"nvidia": "v100"} and required_apart(pod) == {LABEL_JOB: JOB_ID}
        assert pod["automountServiceAccountToken"] is False and pod["restartPolicy"] == "Never"
        assert "ports" not in pod["containers"][0]  # the nodes meet in the job's directory, not on a port
    assert node0["hostname"] == f"{JOB_ID}-0" and "subdomain" not in node0
    assert (workers["spec"]["parallelism"], workers["spec"]["completions"]) == (1, 1)
    assert record["spec"]["activeDeadlineSeconds"] == workers["spec"]["activeDeadlineSeconds"] == 7200
    assert {job["spec"]["template"]["metadata"]["annotations"][ANNOTATION_TIME_LIMIT] for job in (record, workers)} \
        == {"120"}  # what the weekly budget charges ahead for each node's pod


@pytest.mark.parametrize("address", ["198.18.3.4", "10.0.0.1", "fd00::1", "2001:db8::7", "ab::1"])
def test_node_zero_sorts_first_so_it_is_rank_zero(address):
    """torchrun's c10d rendezvous ranks nodes by the address each gives: node 0's IP address must sort before any
    worker pod's name (the job id, then -workers-, then the Job controller's 5 characters)."""
    for suffix in ("00000", "zzzzz", "bcdfg"):
        assert ranked_first(address, f"{JOB_ID}-workers-{suffix}")
    assert JOB_ID.startswith("k8s-")  # what makes it so: every job id begins with a letter after a-f
    record, _ = objects(nodes=2)
    assert '--local-addr="${POD_IP:?}"' in script(record)


def test_one_node_has_no_workers_job():
    record, owned = objects(nodes=1)
    assert owned == []
    assert record["metadata"]["annotations"][ANNOTATION_WORKER_PODS] == "0"


def test_the_scripts_are_bash_meet_in_the_jobs_private_directory_and_end_together():
    record, (workers,) = objects(nodes=3, gpus_per_node=2)
    launch, work = script(record), script(workers)
    bash_syntax_ok(launch)
    bash_syntax_ok(work)
    assert "--nnodes=3 --nproc-per-node=2" in launch and "--nnodes=3 --nproc-per-node=2" in work
    for text in (launch, work):  # one rendezvous per run, in a FileStore only the owner can reach; no address
        assert f'private_rendezvous "$job_dir/.rendezvous" "{JOB_ID}-$generation"' in text
        assert '"${rendezvous[@]}"' in text and "--rdzv-conf=store_type=file" in text
        assert "--rdzv-endpoint=\"$1/$2.store\"" in text and "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1" in text
        assert "is_host" not in text and "POD_IP}:" not in text and "getent" not in text
    assert "--max-restarts=0" in launch and "--max-restarts=0" in work  # one failed process ends the run
    assert "-m chexnet_torch.train" in launch and "--resume" in launch
    assert 'wait_for_pods beating "$nodes/run" 2 ' in launch  # node 0 waits for the 2 other nodes' heartbeats
    assert "workers-done" in launch and "workers-done" in work
    assert "card_in_log \"$job_dir/checkpoints\"" in launch
    assert f'echo "{RUN_ENDED} (exit status $1)" 2>/dev/null > /dev/termination-log' in launch  # FAILED at once
    assert "/opt/dsportal/torch-venv/bin/torchrun" in launch


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_the_objects_validate_strictly(version):
    record, owned = objects(nodes=2, gpus_per_node=2)
    for manifest in (record, *owned, pod_of_job(record), pod_of_job(owned[0])):
        kubernetes_validate.validate({**manifest, "metadata": {**manifest["metadata"]}}, version, strict=True)


def test_the_state_counts_node_zero_and_its_workers():
    record, _ = objects(nodes=2)
    job = {**plain_job([], False), "metadata": record["metadata"]}

    def pod(role: str) -> dict:
        return {"metadata": {"labels": {LABEL_ROLE: role}}, "status": {"phase": "Running"}}
    assert plain_job_state(job, [pod("launcher")]) != RUNNING
    assert plain_job_state(job, [pod("launcher"), pod("worker")]) == RUNNING


def test_the_job_objects_are_node_zeros_record_first_then_its_fence():
    made = job_objects(CFG, spec(nodes=2), JOB_ID, "alice", "v100", plain=True)
    assert [m["kind"] for m in made] == ["Job", "NetworkPolicy", "Job"]
    assert "Secret" not in [m["kind"] for m in made]  # no ssh key: torchrun needs none


def test_a_sweep_trial_runs_torchrun_on_a_private_rendezvous_and_stops_it_when_deleted():
    plan = parse_sweep({"trials": 4, "parallel": 2, "space": {"lr": [0.001, 1e-8]}}, 4, None, 0)
    manifest = sweep_job_manifest(spec(epochs=4, gpus_per_node=2), plan, JOB_ID, "alice", CFG, "v100")
    trial = script(manifest)
    bash_syntax_ok(trial)
    assert "--nnodes=1 --nproc-per-node=2 \"${rendezvous[@]}\"" in trial and '"${train[@]:1}"' in trial
    assert 'private_rendezvous "$run_dir/.rendezvous" "$holder"' in trial and "--standalone" not in trial
    assert "pkill -TERM -x torchrun" in trial and "mpirun" not in trial
    assert 'programkit.sweep_cli claim "$job_dir" "$holder" 4' in trial and "/dev/termination-log" in trial


def test_a_portal_of_mpijobs_does_not_offer_torchrun():
    from dataclasses import replace

    limits = limits_for(replace(CFG, k8s_jobs="mpijob"), KUBE_ALICE.groups)
    assert "chexnet-torch" not in limits.programs and "chexnet" in limits.programs
    with pytest.raises(JobSpecError) as refused:
        from portal.records.spec import parse_job_spec
        parse_job_spec({"template": "chexnet-torch"}, limits, KUBE_ALICE.can_read_dir)
    assert refused.value.field == "template"
    assert "chexnet-torch" in limits_for(CFG, KUBE_ALICE.groups).programs


def test_a_failed_run_in_a_background_pipeline_is_read_as_failed():
    """`wait PID` on a background `cmd | tee` that bash has already reaped answers tee's 0: a failed training read
    as a success (a torchrun job's lost node ended as COMPLETED so). Every Kubernetes script's run writes its own
    status into a file instead, and run_status reads it."""

    from portal.records.templating import template_environment

    helper = template_environment().get_template("run-status.sh").render()
    probe = helper + '''
set -uo pipefail
f=$(mktemp)
{ (exit 3); echo $? > "$f"; } | tee /dev/null &
run=$!
while kill -0 "$run" 2>/dev/null; do sleep 0.1; done
wait "$run"
echo "wait=$? file=$(run_status "$f") none=$(run_status /nonexistent)"
'''
    said = in_a_pod(probe, timeout=30).stdout.strip()
    assert said == "wait=0 file=3 none=1", said
    plan = parse_sweep({"trials": 2, "parallel": 1, "space": {"lr": [0.001, 1e-8]}}, 4, None, 0)
    for program in ("chexnet", "chexnet-torch"):
        made = k8s_spec(template=program, nodes=2)
        record, *_ = job_objects(CFG, made, JOB_ID, "alice", "v100", plain=True, keys=("K", "P"))
        trial = sweep_job_manifest(k8s_spec(template=program), plan, JOB_ID, "alice", CFG, "v100")
        for text in (script(record), script(trial)):
            assert "status=$(run_status " in text and '; } | tee -a "$' in text or "status-$generation" in text, program


def test_stopping_torchrun_stops_the_processes_it_started_even_when_they_ignore_it(tmp_path):
    """A rank stuck in a collective with a vanished peer outlives a killed torchrun and holds node 0's output pipe
    open: stop_torchrun kills torchrun's children too. Here a stand-in `torchrun` (the name is what is matched)
    ignores TERM and starts a child that ignores it as well."""

    from portal.records.templating import template_environment

    fake = tmp_path / "torchrun"
    fake.write_text("#!/bin/bash\ntrap '' TERM\nbash -c \"trap '' TERM; sleep 300\" &\necho $! > \"$1\"\nwait\n")
    fake.chmod(0o755)
    helper = template_environment().get_template("torchrun-stop.sh").render(stop_grace=1)
    probe = helper + f'''
{fake} {tmp_path / "child"} &
for _ in $(seq 50); do [ -s {tmp_path / "child"} ] && break; sleep 0.1; done
stop_torchrun
sleep 0.5
child=$(cat {tmp_path / "child"})
state=$(ps -o stat= -p "$child" | tr -d ' ')
case $state in ""|Z*) echo "child gone" ;; *) echo "child alive" ;; esac  # a zombie has ended: its reaper is not us
pgrep -x torchrun > /dev/null && echo "torchrun alive" || echo "torchrun gone"
'''
    said = in_a_pod(probe, timeout=60).stdout.split("\n")
    assert said[:2] == ["child gone", "torchrun gone"], said


@pytest.mark.parametrize("program", ["chexnet", "chexnet-torch"])
def test_a_launcher_pod_made_again_after_its_job_ended_ends_it_the_same_way_at_once(program, tmp_path):
    """A launcher that ended its job with a failure wrote exit_status and workers-done (which ended the workers);
    its Job then makes a new launcher pod, as for one lost with its node. That pod waited for workers that no
    longer come until the time limit (a failed 1-node Horovod job read RUNNING for 15 minutes). It now ends with the
    same status at once, before it asks for anything."""
    import os
    import re

    record, *_ = job_objects(CFG, k8s_spec(template=program, nodes=2), JOB_ID, "alice", "v100", plain=True,
                             keys=("K", "P"))
    text = re.sub(r"^job_dir=.*$", f"job_dir={tmp_path}", script(record), count=1, flags=re.MULTILINE)
    (tmp_path / "exit_status").write_text("3\n")
    (tmp_path / "workers-done").touch()
    (tmp_path / "output.log").write_text("the first lines\n" + "x" * 9000 + "\nchexnet: --data-dir has no images\n")
    run = in_a_pod(text, timeout=30, env={"PATH": os.environ["PATH"], "POD_IP": "198.18.0.9", "HOME": str(tmp_path)})
    assert run.returncode == 3, run.stdout + run.stderr
    assert f"job {JOB_ID} has ended (exit status 3)" in run.stdout
    assert run.stdout.endswith("chexnet: --data-dir has no images\n") and "the first lines" not in run.stdout
    assert (tmp_path / "workers-done").exists() and not (tmp_path / "nodes" / "node-0.alive").exists()


def test_mpiruns_ssh_tries_a_refused_worker_again_and_the_probe_does_not():
    """A worker pod's NetworkPolicy lets the launcher in only once the enforcer has seen the launcher's address:
    a worker that answered the launcher's probe refused mpirun's ssh a moment later, and the job failed."""
    record, *_ = job_objects(CFG, k8s_spec(nodes=2), JOB_ID, "alice", "v100", plain=True, keys=("K", "P"))
    text = script(record)
    assert 'ssh_agent="$ssh_probe -o ConnectionAttempts=10"' in text and '--mca plm_rsh_agent "$ssh_agent"' in text
    assert 'timeout 10 $ssh_probe "$1" hostname' in text and "ConnectionAttempts" not in text.split("ssh_agent=")[0]
    # ... and the other way, an orted that cannot connect back to mpirun: a run that started no process (none
    # marked .launched) is launched again, at most 3 times, before it counts as the job's failure.
    marked = "bash -c 'touch \"$0\" && exec \"$@\"' \"$job_dir/.launched\" \"${train[@]}\""
    assert marked in text
    assert '[ ! -e "$job_dir/.launched" ] && [ "$launches" -lt 3 ]' in text


@pytest.mark.parametrize("program", ["chexnet", "chexnet-torch"])
def test_a_stopped_run_whose_output_stays_open_is_ended_by_killing_what_holds_it(program, tmp_path):
    """Node 0 stopped a run for a lost node and then waited on the run's `| tee` until the job's time limit (a CI
    run): something still held the pipe. Here an orphan (its parent gone, as a rank of a killed torchrun is) holds
    it; end_stopped_run kills every holder but tee, says so, and the wait ends."""
    import re
    import time

    record, *_ = job_objects(CFG, k8s_spec(template=program, nodes=2), JOB_ID, "alice", "v100", plain=True,
                             keys=("K", "P"))
    text = script(record)
    assert '[ "$lost" -eq 0 ] || end_stopped_run\n    wait "$run"' in text
    function = re.search(r"^end_stopped_run\(\) \{.*?^\}\n", text, flags=re.MULTILINE | re.DOTALL)
    assert function, text
    grace = f'[ "$waited" -lt {STOP_GRACE_S} ]'
    assert grace in function.group(0)
    quick = function.group(0).replace(grace, '[ "$waited" -lt 1 ]')  # its grace, 1 s here: what follows is the test
    probe = f'''set -uo pipefail
job_dir={tmp_path} lost=1
{quick}
( sleep 300 & ) | tee -a {tmp_path}/out.log > /dev/null &
run=$!
sleep 0.5
end_stopped_run
wait "$run"
echo "waited"
'''
    started = time.monotonic()
    said = in_a_pod(probe, timeout=120)
    assert said.stdout.strip().endswith("waited"), said.stdout + said.stderr
    assert time.monotonic() - started < 60  # the orphan would hold it 300 s
    said_there = (tmp_path / "output.log").read_text()
    assert "did not end" in said_there and "sleep" in said_there, said_there
