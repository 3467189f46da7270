"""A sweep on Kubernetes, built and read without a cluster: its one Job of trial pods, the trial script, the record
it carries, and its trials read back from its pods (termination messages and logs, both the user's text)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import kubernetes_validate
import pytest

from portal.records.record import RecordError
from portal.records.spec import JobSpecError
from portal.records.sweep import parse_sweep, sweep_view
from portal.scheduler.kubernetes.manifests import (
    ANNOTATION_SWEEP,
    ANNOTATION_TIME_LIMIT,
    ANNOTATION_TRIALS,
    LABEL_ROLE,
    sweep_job_manifest,
)
from portal.scheduler.kubernetes.records import PARAMS_LINE, TRIAL_LINE, mpijob_record, pod_trials, sweep_job_state
from portal.scheduler.kubernetes.scheduler import KubernetesScheduler
from programkit.sweep import EXIT_FINISHED
from tests.unit.helpers import K8S_CFG as CFG
from tests.unit.helpers import K8S_JOB_ID as JOB_ID
from tests.unit.helpers import KUBERNETES_VERSIONS, bash_syntax_ok, plain_job, pod_of_job
from tests.unit.helpers import k8s_spec as spec

PLAN = parse_sweep({"trials": 6, "parallel": 2, "space": {"lr": [0.001, 1e-8]}}, 4, None, 0)


def sweep_job(plan=PLAN, **raw):
    return sweep_job_manifest(spec(epochs=4, **raw), plan, JOB_ID, "alice", CFG, "v100",
                              submitted_at="2026-11-27T10:15:00+00:00")


def test_a_sweep_is_one_job_of_its_trials_at_most_parallel_at_once():
    manifest = sweep_job(gpus_per_node=2, cpus_per_task=2, time_limit="01:00:00")
    assert (manifest["kind"], manifest["metadata"]["name"]) == ("Job", JOB_ID)
    assert (manifest["spec"]["completions"], manifest["spec"]["parallelism"]) == (6, 2)
    assert manifest["spec"]["activeDeadlineSeconds"] == 3 * 3600  # three rounds of two trials
    pod = manifest["spec"]["template"]["spec"]
    assert pod["containers"][0]["resources"]["limits"] == {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "2"}
    assert pod["automountServiceAccountToken"] is False and pod["restartPolicy"] == "Never"
    assert {t["tolerationSeconds"] for t in pod["tolerations"]} == {30}  # a lost node's pod is replaced soon
    assert manifest["spec"]["template"]["metadata"]["labels"][LABEL_ROLE] == "trial"
    annotations = manifest["spec"]["template"]["metadata"]["annotations"]
    assert (annotations[ANNOTATION_TIME_LIMIT], annotations[ANNOTATION_TRIALS]) == ("60", "6")  # charged ahead
    assert json.loads(manifest["metadata"]["annotations"][ANNOTATION_SWEEP]) == PLAN.to_dict()


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_the_sweep_job_validates_strictly(version):
    manifest = sweep_job(gpus_per_node=1)
    for obj in (manifest, pod_of_job(manifest)):
        kubernetes_validate.validate({**obj, "metadata": {**obj["metadata"]}}, version, strict=True)


def test_the_trial_script_claims_a_task_keeps_it_and_reports_its_trial():
    script = sweep_job(gpus_per_node=2)["spec"]["template"]["spec"]["containers"][0]["command"][2]
    bash_syntax_ok(script)
    assert 'programkit.sweep_cli claim "$job_dir" "$holder" 6' in script
    assert f'"$status" -eq {EXIT_FINISHED}' in script  # every trial finished: the pod has nothing to do
    assert 'touch "$claim_file"' in script and "/dev/termination-log" in script
    assert "mpirun -np 2 --host localhost:2" in script and "--trial" in script and "--resume" in script
    assert "trap stopped TERM" in script and "programkit.sweep_cli fail" in script
    assert json.loads(script.split("printf '%s\\n' ", 1)[1].split(" > ", 1)[0].strip("'")) == PLAN.to_dict()


def test_the_record_carries_the_plan_and_an_edited_plan_is_a_record_error():
    manifest = sweep_job()
    record = mpijob_record(manifest, CFG)
    assert record.sweep == PLAN and record.spec.epochs == 4
    for edited in ("{", json.dumps({**PLAN.to_dict(), "trials": 0}), "[]"):
        bad = {**manifest, "metadata": {**manifest["metadata"],
                                        "annotations": {**manifest["metadata"]["annotations"],
                                                        ANNOTATION_SWEEP: edited}}}
        with pytest.raises(RecordError, match=ANNOTATION_SWEEP):
            mpijob_record(bad, CFG)


def test_a_trial_is_one_pod_so_one_node():
    scheduler = KubernetesScheduler(CFG)
    assert scheduler.sweeps
    scheduler.check_sweep(spec(nodes=1))
    with pytest.raises(JobSpecError) as caught:
        scheduler.check_sweep(spec(nodes=2, gpus_per_node=1))
    assert caught.value.field == "nodes" and "allowed: 1" in str(caught.value)


def trial_pod(name: str, created: str, phase: str, message: str = "") -> dict:
    status: dict = {"phase": phase}
    if message:
        status["containerStatuses"] = [{"state": {"terminated": {"exitCode": 0, "message": message}}}]
    return {"metadata": {"name": name, "creationTimestamp": created}, "status": status}


def row(task: int, number: int, state: str, value, epochs: dict) -> str:
    return json.dumps({"trials": [{"number": number, "task": task, "state": state, "params": {"lr": 1e-8},
                                   "value": value, "epochs": epochs}]})


RUNNING_LOG = """chexnet: sweep task 2 is trial 2, on pod sweep-abcde
chexnet: trial parameters {"number": 2, "task": 2, "params": {"lr": 0.001}}
chexnet.train: epoch 1/4: loss=0.6 auroc/mean=0.71 images/sec=40.0
chexnet.train: epoch 2/4: loss=0.5 auroc/mean=0.74 images/sec=41.0
"""


def test_the_trials_come_from_ended_pods_messages_and_running_pods_logs():
    pods = [trial_pod("p0", "2026-11-27T10:00:00Z", "Succeeded", row(0, 0, "COMPLETE", 0.8, {"1": 0.7, "4": 0.8})),
            trial_pod("p1", "2026-11-27T10:00:00Z", "Succeeded", row(1, 1, "PRUNED", 0.5, {"1": 0.5, "2": 0.5})),
            trial_pod("p2", "2026-11-27T10:01:00Z", "Running"),
            trial_pod("p3", "2026-11-27T10:01:00Z", "Pending")]
    found = pod_trials(PLAN, pods, lambda name: RUNNING_LOG if name == "p2" else "")
    assert found.holders == {0: "p0", 1: "p1", 2: "p2"} and not found.problem
    view = sweep_view(PLAN, found.trials, found.states)
    states = [(r.task, r.state, r.epochs_run, r.pruned_at) for r in view.rows]
    assert states[:4] == [(0, "COMPLETED", 4, None), (1, "PRUNED", 2, 2), (2, "RUNNING", 2, None),
                          (3, "PENDING", 0, None)]
    assert view.best.task == 0 and view.rows[2].params == {"lr": 0.001} and view.rows[2].best_auroc == 0.74
    assert view.rows[2].started_at is None  # a pod without its start time: none
    pods[2]["status"]["startTime"] = "2026-11-27T10:01:30Z"  # a running trial started when its pod did
    found = pod_trials(PLAN, pods, lambda name: RUNNING_LOG if name == "p2" else "")
    assert found.trials[2]["started"] == datetime(2026, 11, 27, 10, 1, 30, tzinfo=UTC).timestamp()


def test_a_lost_pods_task_is_its_replacements_and_hostile_text_is_left_out():
    lost = trial_pod("p0", "2026-11-27T10:00:00Z", "Failed")  # killed with its node: no message
    again = trial_pod("p0b", "2026-11-27T10:02:00Z", "Succeeded", row(0, 0, "COMPLETE", 0.9, {"4": 0.9}))
    forged = trial_pod("p9", "2026-11-27T10:03:00Z", "Succeeded", "not json {")
    beyond = trial_pod("p8", "2026-11-27T10:03:00Z", "Succeeded", row(99, 5, "COMPLETE", 1.0, {}))
    found = pod_trials(PLAN, [lost, again, forged, beyond], lambda name: "")
    assert found.holders == {0: "p0b"} and found.trials[0]["value"] == 0.9
    assert "p9" in found.problem  # an unreadable message is said, not shown as a trial
    log = RUNNING_LOG.replace('{"lr": 0.001}', '{"lr": 0.001, "weights": "/etc/shadow"}')
    running = pod_trials(PLAN, [trial_pod("p2", "t", "Running")], lambda name: log)
    assert running.trials[2]["params"] == {"lr": 0.001}  # a parameter outside the plan is not read


@pytest.mark.parametrize(("conditions", "deleting", "phases", "state"), [
    ((), False, [], "PENDING"),
    ((), False, ["Pending", "Pending"], "PENDING"),
    ((), False, ["Running", "Pending"], "RUNNING"),
    ((("Complete", ""),), False, ["Succeeded"], "COMPLETED"),
    ((("Failed", "DeadlineExceeded"),), False, [], "TIMEOUT"),
    ((), True, ["Running"], "CANCELLED"),
])
def test_the_sweeps_state_comes_from_its_job_and_pods(conditions, deleting, phases, state):
    pods = [{"metadata": {}, "status": {"phase": phase}} for phase in phases]
    assert sweep_job_state(plain_job(conditions, deleting), pods) == state


def test_every_kubernetes_script_copies_the_model_card_into_its_pods_log():
    from portal.scheduler.kubernetes.horovodjob import launcher_script, plain_job_objects

    trial = sweep_job()["spec"]["template"]["spec"]["containers"][0]["command"][2]
    launcher, _ = plain_job_objects(spec(), JOB_ID, "alice", CFG, "v100", private_key="K", public_key="P")
    plain = launcher["spec"]["template"]["spec"]["containers"][0]["command"][2]
    mpijob = launcher_script(spec(), JOB_ID, "/home/jovyan/jobs/x", CFG)
    for script, where in ((trial, '"$run_dir/checkpoints"'), (plain, '"$job_dir/checkpoints"'),
                          (mpijob, '"$job_dir/checkpoints"')):
        bash_syntax_ok(script)
        assert f"card_in_log {where}" in script and 'echo "chexnet: model card $(head -c 65536' in script
    # The trial script is every launcher's: its lines name the program the sweep runs, and the readers take any.
    torch = sweep_job(template="chexnet-torch")["spec"]["template"]["spec"]["containers"][0]["command"][2]
    assert 'echo "chexnet-torch: sweep task $task is trial $number, on pod $holder"' in torch
    assert 'echo "chexnet-torch: model card $(head -c 65536' in torch and "chexnet:" not in torch
    said = 'chexnet-torch: sweep task 2 is trial 5, on pod p\nchexnet-torch: trial parameters {"lr": 0.1}\n'
    assert TRIAL_LINE.findall(said) == [("2", "5")] and PARAMS_LINE.findall(said) == ['{"lr": 0.1}']


def test_a_trials_card_is_read_from_its_ended_pod_without_reading_running_pods_logs(monkeypatch):
    from programkit.model_card import CARD_FORMAT
    from tests.cards import a_card

    record = mpijob_record(sweep_job(), CFG)
    ended = trial_pod("p0", "2026-11-27T10:00:00Z", "Succeeded", row(0, 0, "COMPLETE", 0.8, {"4": 0.8}))
    running = trial_pod("p1", "2026-11-27T10:00:00Z", "Running")
    scheduler = KubernetesScheduler(CFG)
    monkeypatch.setattr(scheduler, "_pods", lambda user, job_id, role=None: [ended, running])
    asked = []

    def log(user, name, tail=None):
        asked.append(name)
        return f"chexnet: model card {json.dumps(a_card())}\n"
    monkeypatch.setattr(scheduler, "_pod_log", log)
    alice = scheduler.person("alice", ())
    assert scheduler.model_card(record, alice, 0)["format"] == CARD_FORMAT
    assert scheduler.model_card(record, alice, 1) is None and scheduler.model_card(record, alice) is None
    assert asked == ["p0"]  # the ended pod's log once; never the running pod's
