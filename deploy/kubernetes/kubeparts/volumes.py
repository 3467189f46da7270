"""Storage for the Kubernetes box's demo users, as a site's administrator provides it: Debian has no dynamic
provisioner, so each user gets two static hostPath PersistentVolumes bound ahead to the claims the portal uses:

    dsportal-home-<user>   -> claim <k8s_home_claim_template> (home-<user>, made by KubeSpawner) in their namespace:
                              <state>/volumes/home/<user>, owned by the image's notebook user (1000:100)
    dsportal-data-<user>   -> claim <k8s_data_claim> (chestxray14, made here, ReadOnlyMany): a directory with
                              the demo data set's TFRecords as chestxray14-tfrecords (the jobs' default data_dir
                              on Kubernetes) and its PNGs as chestxray14-demo, generated once per machine under
                              the cache dir (portal.jobs.demo_data)
    dsportal-site-<user>   -> claim <SITE_PROGRAMS_CLAIM> (made here, ReadOnlyMany) where the box has a
                              site_python_path: that directory, the site's own programs (portal.config_programs)

A hostPath volume is a directory of this machine: every node of the box is this machine, as an NFS export would be
on every node of a cluster. The homes are the box's own, apart from the Slurm box's users' homes.
"""

from __future__ import annotations

import os
import posixpath
import shutil
from pathlib import Path

from kubernetes import client as k8s
from kubernetes.dynamic import DynamicClient

from deploy.kubernetes.kubeparts.api import ensure_user_namespace
from deploy.kubernetes.kubeparts.layout import DEMO_USERS, PORTAL, KubeBox, user_namespace
from portal.config import PortalConfig
from portal.jobs.demo_data import LAYOUT_NAME, ensure_demo_data
from portal.scheduler.kubernetes.manifests import HOME_CLAIM_SIZE
from portal.scheduler.kubernetes.records import limits_for

NOTEBOOK_UID, NOTEBOOK_GID = 1000, 100  # the training image's jovyan, and KubeSpawner's fs_gid
DATA_SET = posixpath.basename(limits_for(PORTAL, ()).default_data_dir)  # chestxray14-tfrecords
SITE_PROGRAMS_CLAIM = "site-programs"  # the claim of a box's site_python_path: its k8s_site_programs_claim


def data_dir(box: KubeBox) -> Path:
    """What the data claim holds: the demo data set's TFRecords as chestxray14-tfrecords, and its PNGs as
    ChestX-ray14 ships them as chestxray14-demo (hard links to the files portal.jobs.demo_data made once per machine
    for the boxes of this name)."""
    root = box.cache_dir / box.name / "data"
    if not (root / DATA_SET).is_dir() or not (root / LAYOUT_NAME).is_dir():
        made = ensure_demo_data(PortalConfig(state_dir=box.cache_dir / box.name))
        root.mkdir(parents=True, exist_ok=True)
        os.chmod(root, 0o755)
        for source, name in ((made, DATA_SET), (made.parent / LAYOUT_NAME, LAYOUT_NAME)):
            if (root / name).is_dir():
                continue
            partial = root / f".{name}"
            shutil.rmtree(partial, ignore_errors=True)
            shutil.copytree(source, partial, copy_function=os.link)
            partial.rename(root / name)
    return root


def home_dir(box: KubeBox, user: str) -> Path:
    return box.path("volumes", "home", user)


def _volume(name: str, path: Path, size: str, mode: str, namespace: str, claim: str) -> dict:
    return {"metadata": {"name": name, "labels": {"app.kubernetes.io/part-of": "dsportal"}},
            "spec": {"capacity": {"storage": size}, "accessModes": [mode], "storageClassName": "",
                     "persistentVolumeReclaimPolicy": "Retain", "hostPath": {"path": str(path), "type": "Directory"},
                     "claimRef": {"namespace": namespace, "name": claim}}}


def ensure_user_volumes(box: KubeBox, hub: DynamicClient, admin: k8s.CoreV1Api) -> list[str]:
    """Each demo user's namespace (as the hub makes it), home and data volumes, and data claim; idempotent."""
    data = data_dir(box)
    lines = []
    for user in DEMO_USERS:
        namespace = ensure_user_namespace(hub, user, box.portal)
        home = home_dir(box, user)
        home.mkdir(parents=True, exist_ok=True)
        os.chown(home, NOTEBOOK_UID, NOTEBOOK_GID)
        os.chmod(home, 0o750)
        home_claim = PORTAL.k8s_home_claim_template.format(username=user)
        wanted = [_volume(f"dsportal-home-{user}", home, HOME_CLAIM_SIZE, "ReadWriteOnce", namespace, home_claim),
                  _volume(f"dsportal-data-{user}", data, "1Gi", "ReadOnlyMany", namespace, PORTAL.k8s_data_claim)]
        claims = {PORTAL.k8s_data_claim: f"dsportal-data-{user}"}
        if box.site_python_path:
            wanted.append(_volume(f"dsportal-site-{user}", Path(box.site_python_path), "1Gi", "ReadOnlyMany",
                                  namespace, SITE_PROGRAMS_CLAIM))
            claims[SITE_PROGRAMS_CLAIM] = f"dsportal-site-{user}"
        for volume in wanted:
            _create(admin.create_persistent_volume, volume)
        for claim, volume_name in claims.items():
            _create(admin.create_namespaced_persistent_volume_claim, namespace, {
                "metadata": {"name": claim},
                "spec": {"accessModes": ["ReadOnlyMany"], "storageClassName": "", "volumeName": volume_name,
                         "resources": {"requests": {"storage": "1Gi"}}}})
        lines.append(f"volumes: {user_namespace(user)}: home {home}, data {data} (claims {home_claim}, "
                     f"{', '.join(claims)})")
    return lines


def hub_site_programs(box: KubeBox) -> tuple[list[dict], list[dict], dict[str, str]]:
    """(mounts, volumes, environment) of the hub's pod for the box's site_python_path: the directory read-only at
    its own path (a hostPath: the hub's namespace is the administrator's), and the settings that name it and its
    claim in the users' namespaces, so that the dashboard and the servers register the site's programs (which ones:
    the box's hub_settings, site_programs and site_launchers). Nothing where the box has none."""
    if not box.site_python_path:
        return [], [], {}
    return ([{"name": "site-programs", "mountPath": box.site_python_path, "readOnly": True}],
            [{"name": "site-programs", "hostPath": {"path": box.site_python_path, "type": "Directory"}}],
            {"DSPORTAL_SITE_PYTHON_PATH": box.site_python_path,
             "DSPORTAL_K8S_SITE_PROGRAMS_CLAIM": SITE_PROGRAMS_CLAIM})


def _create(create, *args) -> None:
    try:
        create(*args)
    except k8s.ApiException as err:
        if err.status != 409:  # made before: a volume's spec cannot change once bound
            raise
