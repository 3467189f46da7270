"""Images for the Kubernetes box's nodes: built by podman on this machine, imported into each node's containerd.

No registry is reachable from the nodes, so the pods use what is imported (`imagePullPolicy: IfNotPresent` or
`Never`). Each node's image store lives in the box's cache dir (KubeBox.image_store) with a stamp of what it holds
(podman's image ID per name), so an image is exported and imported again only when podman's copy changed.
Exported layer by layer: podman saves the image into an OCI layout of its own in the cache dir, uncompressed
(`podman save --format oci-dir --uncompressed`: the layers it holds already are not written again, and nothing
is gzipped), and each node is sent only the blobs its containerd lacks (`ctr content ls`), as a tar on ctr's
stdin, every node at once. A rebuild that changed the project's code (the images' last two layers, about 14 MB)
costs seconds; the first export sends the whole image (the training image: 4.5 GB to each of two nodes, about 3.5
minutes one node after the other). Until
2026-12-03 each rebuild exported and gzipped the whole image and each node read it all: 2 to 4 minutes of every
box start after a rebuild, which a cached `make test` of changed code always has.

    localhost/dsportal-busybox:latest   Debian's static busybox, one layer: the pods' sandbox (pause) image, and
                                        a small image for the box's own checks (always)
    KubeBox.images                      by default PORTAL.k8s_image, the notebook and training image
                                        (docker/training, `make images`)
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from deploy.kubernetes.kubeparts.layout import KubeBox
from deploy.netns import Node
from deploy.supervise import BoxError, run

BUSYBOX = Path("/bin/busybox")
PAUSE_IMAGE = "localhost/dsportal-busybox:latest"
PODMAN_ENV = {**os.environ, "CONTAINERS_CONF": os.environ.get("DSPORTAL_CONTAINERS_CONF",
                                                               "/etc/dsportal/containers.conf")}
IMPORT_TIMEOUT_S = 1800
REF_NAME = "org.opencontainers.image.ref.name"  # the name an OCI layout's index gives each image


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
    copy, and then only the layers that node lacks; one line per image."""
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
        shutil.rmtree(box.cache_dir / box.name / "archives", ignore_errors=True)  # the whole-image export's, gone
        layout = box.cache_dir / box.name / "layouts" / re.sub(r"[^a-z0-9.-]+", "-", name)
        staging = f"{name.rsplit(':', 1)[0]}:dsportal-import-{image_id[:12]}"
        podman("tag", name, staging, what=f"podman tag {name}")
        sent = []
        try:
            layout.parent.mkdir(parents=True, exist_ok=True)
            podman("save", "--format", "oci-dir", "--uncompressed", "-o", str(layout), staging,
                   what=f"podman save {name}")
            blobs = _keep_only(layout, staging)
            # Every node at once: each import is a tar read of the layout, containerd's digest check and its
            # unpack, which wait on the disk as much as on a core (the first start's 4.5 GB to each of two nodes:
            # 263 s one after the other on 2026-12-05). A node whose import failed is not stamped.
            with ThreadPoolExecutor(len(missing), thread_name_prefix="image-import") as pool:
                imports = {node: pool.submit(_import, layout, blobs, staging, name, socket(box, node), node)
                           for node in missing}
            for node, done in imports.items():
                sent.append(done.result())  # the first failure raises, naming its node
                stamps[node.name][name] = image_id
                _stamp(box, node).write_text(json.dumps(stamps[node.name], indent=1) + "\n")
        finally:
            subprocess.run(["podman", "untag", image_id, staging], capture_output=True, env=PODMAN_ENV)
        lines.append(f"images: {name} imported on {', '.join(n.name for n in missing)} ({image_id[:12]}; "
                     f"{', '.join(sent)})")
    return lines


def _keep_only(layout: Path, ref: str) -> dict[str, int]:
    """The layout holds only `ref` (the image just saved): the index's other entries (earlier saves) and the blobs
    only they used are removed. Its blobs (the manifest, the config, the layers), digest: size."""
    index_file = layout / "index.json"
    index = json.loads(index_file.read_text())
    kept = [m for m in index.get("manifests", []) if (m.get("annotations") or {}).get(REF_NAME) == ref][-1:]
    if not kept:
        raise BoxError(f"podman save left no entry for {ref} in {index_file}")
    index["manifests"] = kept
    index_file.write_text(json.dumps(index))
    blob_dir = layout / "blobs" / "sha256"
    manifest = json.loads((blob_dir / kept[0]["digest"].removeprefix("sha256:")).read_text())
    used = {d["digest"]: int(d["size"]) for d in (kept[0], manifest["config"], *manifest["layers"])}
    for blob in blob_dir.iterdir():
        if f"sha256:{blob.name}" not in used:
            blob.unlink()
    return used


def _import(layout: Path, blobs: dict[str, int], staging: str, name: str, address: Path, node: Node) -> str:
    """Import under a name of its own, then move `name` to it. Importing over `name` directly untags the old copy
    while the new one unpacks, and containerd's garbage collector can then remove the layers the two share from
    under the unpacking (containerd#3787: "parent snapshot ... does not exist"); the old copy's own layers go
    only once `name` has moved. Only the blobs the node lacks are sent (a layer it holds is neither sent nor
    unpacked again). A failed unpack leaves the store consistent, so it is tried once more. What was sent, in
    words."""
    ctr = ["ctr", "--address", str(address), "--namespace", "k8s.io"]
    what = f"{node.name}: importing {name}"
    for attempt in (1, 2):
        held = set(run([*ctr, "content", "ls", "--quiet"], f"{node.name}: listing its content").stdout.split())
        send = [digest for digest in blobs if digest not in held]
        members = ["oci-layout", "index.json", *(f"blobs/sha256/{d.removeprefix('sha256:')}" for d in send)]
        try:  # unpacked for the overlayfs snapshotter too, so that the first pod does not wait for it
            with subprocess.Popen(["tar", "-C", str(layout), "-cf", "-", *members], stdout=subprocess.PIPE) as tar:
                imported = subprocess.run([*ctr, "images", "import", "--snapshotter", "overlayfs", "-"],
                                          stdin=tar.stdout, capture_output=True, text=True,
                                          timeout=IMPORT_TIMEOUT_S)
            if tar.returncode != 0 or imported.returncode != 0:
                raise BoxError(f"{what}: tar exited {tar.returncode}, `ctr images import` exited "
                               f"{imported.returncode}: {imported.stderr.strip()}")
            break
        except subprocess.TimeoutExpired as err:
            raise BoxError(f"{what} took over {IMPORT_TIMEOUT_S} s") from err
        except BoxError:
            if attempt == 2:
                raise
    run([*ctr, "images", "tag", "--force", staging, name], f"{node.name}: tagging {name}")
    run([*ctr, "images", "rm", staging], f"{node.name}: removing the import's name {staging}")
    size = sum(blobs[digest] for digest in send)
    return f"{node.name} got {len(send)} of {len(blobs)} blobs, {size / 1e6:.0f} MB"


def _read(path: Path) -> dict[str, str]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}

