"""The Kubernetes scheduler's pure half: a spec in, an MPIJob out; an MPIJob in, a state or a record out. No
cluster here (tests/kubernetes/ has the real API server); the pod templates are checked offline against the
Kubernetes schemas with kubernetes-validate --strict, for the versions docs/admin-guide.md claims."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from portal.metrics import RunMetrics
from portal.records.record import RecordError
from portal.records.spec import JobSpecError, parse_job_spec
from portal.scheduler.kubernetes.horovodjob import mpijob_manifest
from portal.scheduler.kubernetes.manifests import (
    ANNOTATION_CLUSTER,
    ANNOTATION_SPEC,
    LABEL_JOB,
    LABEL_ROLE,
    manifest_yaml,
)
from portal.scheduler.kubernetes.records import K8S_ID, limits_for, log_metrics, mpijob_record, mpijob_state
from portal.scheduler.kubernetes.scheduler import KubernetesError, KubernetesScheduler, new_k8s_id
from tests.unit.helpers import K8S_CFG as CFG
from tests.unit.helpers import K8S_JOB_ID as JOB_ID
from tests.unit.helpers import KUBE_ALICE as ALICE
from tests.unit.helpers import KUBERNETES_VERSIONS, bash_syntax_ok, required_apart
from tests.unit.helpers import k8s_spec as spec


def manifest(**raw) -> dict:
    return mpijob_manifest(spec(**raw), JOB_ID, "alice", CFG, "v100", submitted_at="2026-11-21T10:15:00+00:00")


def replica(m: dict, role: str) -> dict:
    return m["spec"]["mpiReplicaSpecs"][role]["template"]


def as_pod(template: dict) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "check", **template["metadata"]},
            "spec": template["spec"]}


def test_two_nodes_of_four_gpus_is_a_launcher_and_two_workers_with_four_slots_each():
    m = manifest(nodes=2, gpus_per_node=4, cpus_per_task=4, memory_gb=64, time_limit="02:00:00")
    assert (m["apiVersion"], m["kind"]) == ("kubeflow.org/v2beta1", "MPIJob")
    assert m["metadata"]["name"] == JOB_ID and m["metadata"]["namespace"] == "dsportal-u-alice"
    assert m["metadata"]["labels"]["dsportal/user"] == "alice"
    assert m["spec"]["slotsPerWorker"] == 4
    assert m["spec"]["runPolicy"] == {"cleanPodPolicy": "Running", "backoffLimit": 0, "activeDeadlineSeconds": 7200}
    replicas = m["spec"]["mpiReplicaSpecs"]
    assert (replicas["Launcher"]["replicas"], replicas["Worker"]["replicas"]) == (1, 2)
    worker = replica(m, "Worker")
    (container,) = worker["spec"]["containers"]
    assert container["resources"]["limits"] == {"cpu": "16", "memory": "64Gi", "nvidia.com/gpu": "4"}
    assert container["resources"]["requests"] == container["resources"]["limits"]
    assert worker["spec"]["nodeSelector"] == {"nvidia": "v100"}
    assert required_apart(worker["spec"]) == {LABEL_JOB: JOB_ID, LABEL_ROLE: "worker"}  # a node each, as -N 2
    for template in (worker, replica(m, "Launcher")):
        assert template["metadata"]["annotations"] == {"sidecar.istio.io/inject": "false",
                                                       "dsportal/time-limit-minutes": "120"}
        assert template["metadata"]["labels"]["dsportal/job-id"] == JOB_ID
    assert "nvidia.com/gpu" not in json.dumps(replica(m, "Launcher"))  # mpirun needs no GPU


def test_workers_mount_the_data_read_only_the_home_and_shm_in_memory():
    worker = replica(manifest(gpus_per_node=1), "Worker")
    volumes = {v["name"]: v for v in worker["spec"]["volumes"]}
    assert volumes["data"]["persistentVolumeClaim"] == {"claimName": "chestxray14", "readOnly": True}
    assert volumes["home"]["persistentVolumeClaim"] == {"claimName": "home-alice"}
    assert volumes["dshm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "8Gi"}
    mounts = {m["name"]: m for m in worker["spec"]["containers"][0]["volumeMounts"]}
    assert mounts["data"] == {"name": "data", "mountPath": "/data", "readOnly": True}
    assert mounts["dshm"]["mountPath"] == "/dev/shm" and mounts["home"]["mountPath"] == "/home/jovyan"


def test_a_cpu_job_asks_for_no_gpu_and_no_gpu_node():
    m = manifest(gpus_per_node=0)
    worker = replica(m, "Worker")
    assert m["spec"]["slotsPerWorker"] == 1
    assert "nvidia.com/gpu" not in worker["spec"]["containers"][0]["resources"]["limits"]
    assert "nodeSelector" not in worker["spec"]


def test_the_launcher_runs_mpirun_over_every_worker_with_quoted_values():
    m = manifest(nodes=2, gpus_per_node=2, data_dir="/data/set with 'quotes' $(id)")
    command = replica(m, "Launcher")["spec"]["containers"][0]["command"]
    assert command[:2] == ["/bin/bash", "-c"]
    script = command[2]
    bash_syntax_ok(script)
    assert "mpirun -np 4 --map-by socket --bind-to none" in script
    assert "--data-dir '/data/set with '\"'\"'quotes'\"'\"' $(id)'" in script
    assert f"job_dir=/home/jovyan/jobs/dsportal/{JOB_ID}" in script and "--progress epoch" in script


def test_data_dir_must_be_on_the_data_or_home_volume():
    for outside in ("/etc", "/data/../etc", "relative/path", "/datasets"):
        with pytest.raises(JobSpecError) as err:
            spec(data_dir=outside)
        assert err.value.field == "data_dir"
    assert spec(data_dir="/home/jovyan/my-set").data_dir == "/home/jovyan/my-set"


def test_the_group_quota_bounds_the_gpus():
    limits = limits_for(CFG, ("datascientists",))
    with pytest.raises(JobSpecError) as err:
        parse_job_spec({"gpus_per_node": 4}, limits, ALICE.can_read_dir)
    assert err.value.field == "gpus_per_node"
    assert limits_for(CFG, ("gpu-users",)).max_gpus_per_node == 8


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_the_pod_templates_validate_strictly(version):
    m = manifest(nodes=2, gpus_per_node=2)
    for role in ("Launcher", "Worker"):
        kubernetes_validate.validate(as_pod(replica(m, role)), version, strict=True)


def test_a_pod_template_with_a_typo_is_caught_by_the_validation():
    pod = as_pod(replica(manifest(), "Worker"))
    pod["spec"]["containers"][0]["volumeMount"] = []
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(pod, KUBERNETES_VERSIONS[-1], strict=True)


@pytest.mark.parametrize(("conditions", "deleting", "state"), [
    ([], False, "PENDING"),
    ([("Created", "True", "")], False, "PENDING"),
    ([("Created", "True", ""), ("Running", "True", "")], False, "RUNNING"),
    ([("Running", "False", ""), ("Succeeded", "True", "")], False, "COMPLETED"),
    ([("Running", "False", ""), ("Failed", "True", "BackoffLimitExceeded")], False, "FAILED"),
    ([("Failed", "True", "DeadlineExceeded")], False, "TIMEOUT"),
    ([("Running", "True", ""), ("Suspended", "True", "")], False, "PENDING"),
    ([("Running", "True", "")], True, "CANCELLED"),
])
def test_the_state_comes_from_the_conditions(conditions, deleting, state):
    mpijob = {"metadata": {"deletionTimestamp": "2026-11-21T10:00:00Z"} if deleting else {},
              "status": {"conditions": [{"type": t, "status": s, "reason": r} for t, s, r in conditions]}}
    assert mpijob_state(mpijob) == state


def test_the_mpijob_is_the_record():
    m = manifest(epochs=3)
    record = mpijob_record(m, CFG)
    assert (record.id, record.scheduler, record.user) == (JOB_ID, "kubernetes", "alice")
    assert record.spec == spec(epochs=3) and record.submitted_at == "2026-11-21T10:15:00+00:00"
    assert record.logdir == Path(f"/home/jovyan/jobs/dsportal/{JOB_ID}/tensorboard")
    assert record.run_prefix == f"dsportal/{JOB_ID}"


def test_a_job_of_the_older_layout_keeps_its_directory_and_a_bad_cluster_is_not_a_record():
    """An MPIJob submitted before each cluster had a directory under ~/jobs (no cluster annotation) wrote its files
    in ~/jobs/<id>; the annotation is the user's to edit, so a cluster that is not a name is refused."""
    m = manifest()
    notes = m["metadata"]["annotations"]
    assert notes[ANNOTATION_CLUSTER] == CFG.cluster_name
    old = {**m, "metadata": {**m["metadata"], "annotations": {k: v for k, v in notes.items()
                                                              if k != ANNOTATION_CLUSTER}}}
    record = mpijob_record(old, CFG)
    assert record.job_dir == Path(f"/home/jovyan/jobs/{JOB_ID}") and record.run_prefix == JOB_ID
    for bad in ("../bob", "Other", 7, "", "x" * 41):
        edited = {**m, "metadata": {**m["metadata"], "annotations": {**notes, ANNOTATION_CLUSTER: bad}}}
        with pytest.raises(RecordError, match=ANNOTATION_CLUSTER):
            mpijob_record(edited, CFG)


def test_an_mpijob_that_is_not_the_portals_is_not_a_record():
    m = manifest()
    foreign = {**m, "metadata": {**m["metadata"], "labels": {"dsportal/user": "alice"}}}
    with pytest.raises(ValueError):
        mpijob_record(foreign, CFG)
    with pytest.raises(ValueError):
        mpijob_record({**m, "metadata": {**m["metadata"], "name": "someone-elses"}}, CFG)
    broken = {**m, "metadata": {**m["metadata"], "annotations": {ANNOTATION_SPEC: "{"}}}
    with pytest.raises(ValueError):
        mpijob_record(broken, CFG)


@pytest.mark.parametrize("annotation", [None, 7, "[1, 2]", '"spec"', '{"epochs": "5"}', '{"epochs": true}',
                                        '{"epochs": NaN}', '{"model": "' + "x" * 70000 + '"}', "[" * 100000])
def test_an_edited_spec_annotation_is_a_record_error_never_a_crash(annotation):
    """The user may edit their MPIJob's annotations: whatever is there is refused as a record, never trusted."""
    m = manifest()
    notes = {} if annotation is None else {ANNOTATION_SPEC: annotation}
    edited = {**m, "metadata": {**m["metadata"], "annotations": notes}}
    with pytest.raises(RecordError) as refused:
        mpijob_record(edited, CFG)
    assert "annotation" in str(refused.value) and len(str(refused.value)) < 300


def test_metrics_from_the_records_lines_in_the_log_any_program_and_hostile_lines_ignored():
    """The per-epoch record's lines (`dsportal.epoch`, every program's rank 0), schema-checked: per-class AUROC
    too; a line of the wrong shape, a NaN, a huge or cut line is not read, and the human lines are not looked at."""
    def line(epoch: int, mean: float | None, rate: float, **more) -> str:
        scalars = {"loss/train": 0.1, "auroc/mean": mean, "auroc/Mass": mean, "auroc/Hernia": None}
        return "dsportal.epoch " + json.dumps({"epoch": epoch, "logdir": "/l", "scalars": scalars,
                                               "images_per_sec": rate, "program": "chexnet-torch", **more}) + "\n"
    log = (line(1, 0.7, 40.5) + "chexnet.train: epoch 2/2: auroc/mean=0.9999 images/sec=1.0\n" + line(2, 0.65, 48.0)
           + 'dsportal.epoch {"epoch": "3", "logdir": "/l", "scalars": {}}\n'  # wrong type
           + 'dsportal.epoch {"epoch": 4, "logdir": "/l", "scalars": {"auroc/mean": NaN}}\n'  # not finite
           + 'dsportal.epoch {"epoch": 5, "logdir": "/l", "scal\n'  # cut short
           + "dsportal.epoch " + "[" * 100_000 + "\n")
    metrics = log_metrics(log)
    assert (metrics.images_per_sec, metrics.best_mean_auroc, metrics.best_epoch, metrics.epochs_done) == (
        48.0, 0.7, 1, 2)
    assert metrics.per_class_auroc == {"Mass": 0.7} and metrics.mean_auroc_series == (0.7, 0.65)
    assert log_metrics(line(1, 0.5, 10.0) + line(1, 0.6, 12.0)).best_mean_auroc == 0.6  # a resumed epoch: the last


def test_ids_are_mpijob_names_and_unique():
    ids = {new_k8s_id() for _ in range(50)}
    assert len(ids) == 50 and all(K8S_ID.match(i) and len(i) <= 63 and i == i.lower() for i in ids)


def test_metrics_from_the_launchers_log():
    log = ("chexnet.train: epoch 1/2: loss/train=0.1 loss/val=0.2 auroc/mean=0.7000 on 17 validation images, "
           "lr=0.001, images/sec=40.5 (all workers); AUROC undefined for Hernia\n"
           "chexnet.train: epoch 2/2: loss/train=0.1 loss/val=0.2 auroc/mean=0.6500 on 17 validation images, "
           "lr=0.001, images/sec=48.0 (all workers)\n")
    metrics = log_metrics(log)
    assert (metrics.images_per_sec, metrics.best_mean_auroc, metrics.best_epoch, metrics.epochs_done) == (
        48.0, 0.7, 1, 2)
    assert (metrics.images_per_sec_series, metrics.mean_auroc_series, metrics.epoch_seconds) == (
        (40.5, 48.0), (0.7, 0.65), None)  # the log line has no time
    assert log_metrics("") == dataclasses.replace(metrics, images_per_sec=None, best_mean_auroc=None,
                                                  best_epoch=None, epochs_done=0, images_per_sec_series=(),
                                                  mean_auroc_series=())


def test_a_resumed_runs_repeated_epoch_counts_once_and_a_malformed_number_is_not_read():
    line = "[1,0]<stderr>:chexnet.train: epoch {}/3: auroc/mean={} on 17 validation images, images/sec={} (all)\n"
    log = (line.format(1, "0.6", "30.0") + line.format(2, "0.8", "31.0") + "requeued\n"
           + line.format(2, "0.7", "29.0") + line.format(3, "n/a", "1.2.3"))
    metrics = log_metrics(log)
    assert (metrics.images_per_sec_series, metrics.mean_auroc_series) == ((30.0, 29.0), (0.6, 0.7))
    assert (metrics.best_mean_auroc, metrics.best_epoch, metrics.epochs_done) == (0.7, 2, 2)
    many = "".join(line.format(e, "0.5", f"{e}.0") for e in range(1, 251))
    assert log_metrics(many).images_per_sec_series == tuple(float(e) for e in range(51, 251))
    assert RunMetrics.from_json(json.dumps(log_metrics(many).to_dict())) == log_metrics(many)


def test_the_rendered_manifest_reads_back_and_keeps_the_script_readable():
    text = manifest_yaml(manifest())
    assert yaml.safe_load(text) == manifest() and "&id" not in text
    assert "command:\n" in text and "- |\n" in text  # the launcher script as a literal block


@pytest.mark.parametrize(("kind", "first"), [("plain", "Job"), ("mpijob", "MPIJob")])
def test_render_prints_the_jobs_objects(kind, first):
    scheduler = KubernetesScheduler(dataclasses.replace(CFG, k8s_jobs=kind))
    rendered = list(yaml.safe_load_all(scheduler.render(spec(nodes=2, gpus_per_node=2), ALICE, "t4")))
    assert rendered[0]["kind"] == first and rendered[0]["metadata"]["namespace"] == "dsportal-u-alice"
    if kind == "mpijob":
        assert rendered[0]["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] == 2
        assert [m["kind"] for m in rendered] == ["MPIJob", "NetworkPolicy"]
    else:  # the policy before the workers: they are reachable by their job's pods as they start
        assert [m["kind"] for m in rendered] == ["Job", "NetworkPolicy", "Secret", "Job"]
        assert rendered[3]["spec"]["parallelism"] == 2
        assert rendered[2]["stringData"]["id_ed25519"] == "<made at submit>"  # no key in a dry run
    fence = rendered[1]
    assert fence["metadata"]["name"] == "k8s-<date>-<time>-<random>" == rendered[0]["metadata"]["name"]


def test_without_credentials_the_error_says_where_it_looked(monkeypatch):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(KubernetesError) as err:
        KubernetesScheduler(CFG).limits(ALICE)
    assert "no credentials for the Kubernetes API from the pod's service account" in str(err.value)


def test_the_sites_job_environment_names_the_home_volume_for_home():
    cfg = dataclasses.replace(CFG, jobs_environment=("KERAS_HOME={home}/.cache/keras",))

    def texts(value):  # every string in the manifest: the launcher's script among them
        if isinstance(value, dict):
            return [t for v in value.values() for t in texts(v)]
        return [t for v in value for t in texts(v)] if isinstance(value, list) else [str(value)]
    script = "\n".join(texts(mpijob_manifest(spec(), JOB_ID, "alice", cfg, "v100")))
    assert f"export KERAS_HOME={cfg.k8s_home_mount.rstrip('/')}/.cache/keras\n" in script
    assert "-x KERAS_HOME " in script
