"""deploy.kubernetes.kubeparts.api.apply: what a box's `up` does to each of its objects."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from kubernetes.dynamic.exceptions import NotFoundError

from deploy.kubernetes.kubeparts import api
from deploy.supervise import BoxError

DEPLOYMENT = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "hub", "namespace": "dsportal"}}


class Handle:
    """One object's API, as the dynamic client's resource: it is being deleted for `deleting` more looks."""

    def __init__(self, deleting: int):
        self.deleting, self.made, self.replaced = deleting, [], []

    def get(self, name, namespace):
        if self.made:
            return SimpleNamespace(metadata=SimpleNamespace(resourceVersion="2", deletionTimestamp=None))
        if self.deleting <= 0:
            raise NotFoundError(SimpleNamespace(status=404, reason="Not Found", body=b"", headers={}))
        self.deleting -= 1
        return SimpleNamespace(metadata=SimpleNamespace(resourceVersion="1", deletionTimestamp="2026-12-02T13:00:00Z",
                                                        finalizers=["foregroundDeletion"]))

    def create(self, body, namespace):
        self.made.append(body)

    def replace(self, body, namespace):
        self.replaced.append(body)


def test_an_object_being_deleted_is_waited_for_and_made_anew_not_replaced(monkeypatch):
    handle = Handle(deleting=3)
    monkeypatch.setattr(api, "resource", lambda client, version, kind: handle)
    monkeypatch.setattr(api.time, "sleep", lambda seconds: None)
    assert api.apply(None, DEPLOYMENT, replaceable=("Deployment",)) == "Deployment dsportal/hub: created"
    assert handle.made == [DEPLOYMENT] and handle.replaced == []


def test_one_still_being_deleted_after_the_wait_is_an_error_naming_it_and_its_finalizers(monkeypatch):
    handle = Handle(deleting=10**6)
    monkeypatch.setattr(api, "resource", lambda client, version, kind: handle)
    monkeypatch.setattr(api.time, "sleep", lambda seconds: None)
    with pytest.raises(BoxError, match=r"Deployment dsportal/hub: still being deleted .*foregroundDeletion"):
        api._gone(handle, DEPLOYMENT["metadata"], "Deployment dsportal/hub", timeout=0.0)
    assert handle.made == [] and handle.replaced == []
