"""The dashboard's small parts, without a server: reading the submit form, listing the templates, the timed
cache, the hub's user model, and the one mapping of errors to HTTP statuses."""

from __future__ import annotations

import pytest

from portal.scheduler.kubernetes.errors import KubernetesError
from portal.service.base import as_portal_error
from portal.service.board import TimedCache
from portal.service.hub_user import HubUser
from portal.service.pages import notebook_templates
from portal.service.submit_form import form_spec


def test_form_spec_keeps_given_fields_and_reads_checkboxes():
    spec = form_spec({"nodes": [b"1"], "epochs": [b" "], "chexnet.fp16": [b"on"], "mail": [b"on"], "_xsrf": [b"x"]})
    assert spec == {"nodes": "1", "fp16": True, "xla": False, "mail": True}
    assert form_spec({"nodes": [b"1"]})["mail"] is False  # an unticked box is not sent: off, not "the default"



def test_notebook_templates_lists_ipynb_files(tmp_path):
    (tmp_path / "b.ipynb").write_text("{}")
    (tmp_path / "a.ipynb").write_text("{}")
    (tmp_path / "notes.txt").write_text("")
    assert notebook_templates(tmp_path) == ["a.ipynb", "b.ipynb"]
    assert notebook_templates(tmp_path / "missing") == []


def test_timed_cache_keeps_final_values_for_good():
    now = [0.0]
    cache = TimedCache(5, clock=lambda: now[0])
    cache.put("running", 1)
    cache.put("ended", 2, final=True)
    now[0] = 10
    assert (cache.get("running"), cache.get("ended")) == (None, 2)
    cache.put("running", 1)
    assert (cache.get("running"), cache.get("running", want_final=True)) == (1, None)


@pytest.mark.parametrize("model, expected", [
    ({"name": "alice", "groups": ["gpu-users", "datascientists"], "admin": False,
      "servers": {"": {"ready": True}}}, HubUser("alice", ("datascientists", "gpu-users"), False, True)),
    ({"name": "admin", "admin": True}, HubUser("admin", (), True, False)),
])
def test_hub_user_from_the_hubs_model(model, expected):
    assert HubUser.from_model(model) == expected


def test_kubernetes_refusals_are_the_users_and_an_absent_api_server_is_503():
    quota = as_portal_error(KubernetesError("the Kubernetes API refused creating an MPIJob: 403 exceeded quota", 403))
    assert (quota.status_code, quota.message) == (400, "the Kubernetes API refused creating an MPIJob: 403 exceeded "
                                                       "quota")
    assert as_portal_error(KubernetesError("the Kubernetes API did not answer: timed out")).status_code == 503
    assert as_portal_error(KubernetesError("refused: 500 etcd is down", 500)).status_code == 503
