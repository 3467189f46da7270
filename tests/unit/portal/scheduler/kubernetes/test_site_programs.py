"""A site's own programs on Kubernetes (portal.config_programs): every pod that runs a program mounts the claim
k8s_site_programs_claim read-only at site_python_path, which its script's PYTHONPATH names; without the claim, no pod
mounts anything more, whatever the launcher."""

from __future__ import annotations

import dataclasses
import json

import pytest

from portal.records.sweep import parse_sweep
from portal.scheduler.kubernetes.horovodjob import mpijob_manifest
from portal.scheduler.kubernetes.jobs import job_objects
from portal.scheduler.kubernetes.manifests import DATA, SITE, sweep_job_manifest
from tests.unit.helpers import K8S_CFG as CFG
from tests.unit.helpers import K8S_JOB_ID as JOB_ID
from tests.unit.helpers import k8s_spec as spec

SITE_CFG = dataclasses.replace(CFG, site_python_path="/opt/site-programs", k8s_site_programs_claim="site-programs")
PLAN = parse_sweep({"trials": 2, "parallel": 2}, 4, None, 0)


def pod_templates(cfg, template: str) -> list[dict]:
    """Every pod template of a 2-node job of `template` (plain objects, and Horovod's MPIJob) and of its sweep."""
    job = spec(template=template, nodes=2)
    found = [made["spec"]["template"] for made in job_objects(cfg, job, JOB_ID, "alice", "v100", plain=True)
             if made["kind"] == "Job"]
    if template == "chexnet":
        found += [r["template"] for r in mpijob_manifest(job, JOB_ID, "alice", cfg, "v100")["spec"]
                  ["mpiReplicaSpecs"].values()]
    found.append(sweep_job_manifest(spec(template=template), PLAN, JOB_ID, "alice", cfg, "v100")["spec"]["template"])
    return found


def trains(template: dict) -> bool:
    return any(volume["name"] == DATA for volume in template["spec"]["volumes"])


@pytest.mark.parametrize("template", ["chexnet", "chexnet-torch"])
def test_every_pod_that_trains_mounts_the_sites_programs_read_only_on_its_python_path(template):
    training = [t for t in pod_templates(SITE_CFG, template) if trains(t)]
    assert len(training) >= 3  # node pods or workers, a sweep's trial
    for pod in training:
        volume = next(v for v in pod["spec"]["volumes"] if v["name"] == SITE)
        assert volume["persistentVolumeClaim"] == {"claimName": "site-programs", "readOnly": True}
        container = pod["spec"]["containers"][0]
        assert {"name": SITE, "mountPath": "/opt/site-programs", "readOnly": True} in container["volumeMounts"]
    scripts = json.dumps([t["spec"]["containers"][0].get("command") for t in training])
    assert "export PYTHONPATH=/opt/site-programs" in scripts


@pytest.mark.parametrize("template", ["chexnet", "chexnet-torch"])
def test_without_a_site_claim_no_pod_mounts_more_or_names_a_python_path(template):
    for pod in pod_templates(CFG, template):
        assert all(v["name"] != SITE for v in pod["spec"]["volumes"])
        assert "PYTHONPATH" not in json.dumps(pod)
