"""Images for the Kubernetes box's nodes: built by podman on this machine, imported into each node's containerd.

No registry is reachable from the nodes, so the pods use what is imported (`imagePullPolicy: IfNotPresent` or
`Never`). Each node's image store lives in the box's cache dir (KubeBox.image_store) with a stamp of what it holds
(podman's image ID per name), so an image is exported and imported again only when podman's copy changed:
about 1 s per 10 MB the first time (the training image: minutes), seconds afterwards.

    localhost/dsportal-busybox:latest   Debian's static busybox, one layer: the pods' sandbox (pause) image, and
                                        a small image for the box's own checks (always)
    KubeBox.images                      by default PORTAL.k8s_image, the notebook and training image
                                        (docker/training, `make images`)
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import tarfile
import tempfile
from pathlib import Path

from deploy.kubernetes.kubeparts.layout import KubeBox
from deploy.netns import Node
from deploy.supervise import BoxError, run

BUSYBOX = Path("/bin/busybox")
PAUSE_IMAGE = "localhost/dsportal-busybox:latest"
PODMAN_ENV = {**os.environ, "CONTAINERS_CONF": os.environ.get("DSPORTAL_CONTAINERS_CONF",
                                                               "/etc/dsportal/containers.conf")}
IMPORT_TIMEOUT_S = 1800


def podman(*args: str, what: str) -> str:
    return run(["podman", *args], what, env=PODMAN_ENV).stdout.strip()


def podman_id(name: str) -> str | None:
    found = subprocess.run(["podman", "image", "inspect", "--format", "{{.Id}}", name], text=True,
                           capture_output=True, env=PODMAN_ENV)
    return found.stdout.strip() or None if found.returncode == 0 else None


def ensure_busybox() -> str:
    """localhost/dsportal-busybox from /bin/busybox (podman import of a one-layer rootfs); made once per busybox."""
    if not os.access(BUSYBOX, os.X_OK):
        raise BoxError(f"{BUSYBOX} is missing: `make kube-build` installs busybox-static")
    version = hashlib.sha256(BUSYBOX.read_bytes()).hexdigest()[:16]
    label = podman("image", "inspect", "--format", '{{index .Labels "dsportal.busybox"}}', PAUSE_IMAGE,
                   what="podman image inspect") if podman_id(PAUSE_IMAGE) else ""
    if label == version:
        return PAUSE_IMAGE
    applets = subprocess.run([str(BUSYBOX), "--list"], capture_output=True, text=True).stdout.split()
    with tempfile.TemporaryDirectory() as tmp:
        archive = Path(tmp) / "rootfs.tar"
        with tarfile.open(archive, "w") as tar:
            tar.add(BUSYBOX, "bin/busybox")
            for applet in applets:
                if applet != "busybox":
                    link = tarfile.TarInfo(f"bin/{applet}")
                    link.type, link.linkname = tarfile.SYMTYPE, "busybox"
                    tar.addfile(link)
        # The sandbox runs the image's command; containerd stops a sandbox with SIGKILL.
        podman("import", "--change", 'CMD ["/bin/sleep", "2147483647"]', "--change", "ENV PATH=/bin",
               "--change", f"LABEL dsportal.busybox={version}", str(archive), PAUSE_IMAGE,
               what="podman import (the busybox image)")
    return PAUSE_IMAGE


def _stamp(box: KubeBox, node: Node) -> Path:
    return box.image_store(node.name) / "dsportal-imported.json"


def ensure_images(box: KubeBox, nodes: tuple[Node, ...], socket, names: list[str]) -> list[str]:
    """Each image in each node's containerd, exported from podman only when some node lacks podman's current
    copy; one line per image."""
    lines = []
    for name in names:
        image_id = podman_id(name)
        if image_id is None:
            raise BoxError(f"image {name} is not in podman: build it with `make images`")
        stamps = {node.name: _read(_stamp(box, node)) for node in nodes}
        missing = [node for node in nodes if stamps[node.name].get(name) != image_id]
        if not missing:
            lines.append(f"images: {name} on every node ({image_id[:12]})")
            continue
        archives = box.cache_dir / box.name / "archives"
        archives.mkdir(parents=True, exist_ok=True)
        archive = archives / f"{image_id[:12]}.tar"
        staging = f"{name.rsplit(':', 1)[0]}:dsportal-import-{image_id[:12]}"
        podman("tag", name, staging, what=f"podman tag {name}")
        try:
            podman("save", "--format", "oci-archive", "-o", str(archive), staging, what=f"podman save {name}")
            for node in missing:
                _import(archive, staging, name, socket(box, node), node)
                stamps[node.name][name] = image_id
                _stamp(box, node).write_text(json.dumps(stamps[node.name], indent=1) + "\n")
        finally:
            archive.unlink(missing_ok=True)
            subprocess.run(["podman", "untag", image_id, staging], capture_output=True, env=PODMAN_ENV)
        lines.append(f"images: {name} imported on {', '.join(n.name for n in missing)} ({image_id[:12]})")
    return lines


def _import(archive: Path, staging: str, name: str, address: Path, node: Node) -> None:
    """Import under a name of its own, then move `name` to it. Importing over `name` directly untags the old copy
    while the new one unpacks, and containerd's garbage collector can then remove the layers the two share from
    under the unpacking (containerd#3787: "parent snapshot ... does not exist"); the old copy's own layers go
    only once `name` has moved. A failed unpack leaves the store consistent, so it is tried once more."""
    ctr = ["ctr", "--address", str(address), "--namespace", "k8s.io"]
    what = f"{node.name}: importing {name}"
    for attempt in (1, 2):
        try:  # unpacked for the overlayfs snapshotter too, so that the first pod does not wait for it
            run([*ctr, "images", "import", "--snapshotter", "overlayfs", str(archive)], what,
                timeout=IMPORT_TIMEOUT_S)
            break
        except subprocess.TimeoutExpired as err:
            raise BoxError(f"{what} took over {IMPORT_TIMEOUT_S} s") from err
        except BoxError:
            if attempt == 2:
                raise
    run([*ctr, "images", "tag", "--force", staging, name], f"{node.name}: tagging {name}")
    run([*ctr, "images", "rm", staging], f"{node.name}: removing the import's name {staging}")


def _read(path: Path) -> dict[str, str]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}

