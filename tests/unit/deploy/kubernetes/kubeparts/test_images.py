"""The image export's OCI layout (deploy/kubernetes/kubeparts/images.py): after each `podman save` into it, the
layout keeps only the image just saved and the blobs it uses, so that it holds one image's layers and the next
save writes only the layers that changed. (The import of only the blobs a node lacks runs at every start of the
Kubernetes test box: tests/kubernetes.)"""

from __future__ import annotations

import hashlib
import json

import pytest

from deploy.kubernetes.kubeparts.images import REF_NAME, _keep_only
from deploy.supervise import BoxError


def blob(layout, data: bytes) -> dict:
    digest = hashlib.sha256(data).hexdigest()
    (layout / "blobs" / "sha256" / digest).write_bytes(data)
    return {"digest": f"sha256:{digest}", "size": len(data)}


def image(layout, ref: str, *layers: bytes) -> dict:
    config = blob(layout, json.dumps({"ref": ref}).encode())
    manifest = json.dumps({"schemaVersion": 2, "config": config, "layers": [blob(layout, x) for x in layers]})
    return {**blob(layout, manifest.encode()), "annotations": {REF_NAME: ref}}


def test_the_layout_keeps_the_image_just_saved_and_its_blobs_only(tmp_path):
    (tmp_path / "blobs" / "sha256").mkdir(parents=True)
    old = image(tmp_path, "localhost/x:dsportal-import-old", b"base layer", b"old code")
    new = image(tmp_path, "localhost/x:dsportal-import-new", b"base layer", b"new code")
    (tmp_path / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [old, new]}))
    used = _keep_only(tmp_path, "localhost/x:dsportal-import-new")
    left = {f"sha256:{p.name}" for p in (tmp_path / "blobs" / "sha256").iterdir()}
    assert left == set(used) and len(used) == 4  # the manifest, the config, two layers
    assert hashlib.sha256(b"old code").hexdigest() not in {d.removeprefix("sha256:") for d in left}
    assert used[new["digest"]] == new["size"]
    assert json.loads((tmp_path / "index.json").read_text())["manifests"] == [new]


def test_a_save_that_left_no_entry_for_the_image_is_an_error_naming_it(tmp_path):
    (tmp_path / "blobs" / "sha256").mkdir(parents=True)
    (tmp_path / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [
        image(tmp_path, "localhost/x:other", b"layer")]}))
    with pytest.raises(BoxError, match="no entry for localhost/x:dsportal-import-new"):
        _keep_only(tmp_path, "localhost/x:dsportal-import-new")
