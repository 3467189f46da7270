"""The directory as a user's pod on the Kubernetes box finds it (issue 49): through the relay on the box's bridge only
LDAPS answers (the plain LDAP port is refused), an anonymous search over it is refused, and wrong passwords lock an
account, which the hub in its pod then says in its own words. The pod is a plain one of the training image in
alice's namespace, running ldap3 as a user's notebook could; slapd's own rules: tests/integration/test_directory.py.
"""

from __future__ import annotations

import json
import socket
import uuid

import pytest
from kubernetes import client as k8s

from portal.auth import ACCOUNT_LOCKED
from tests.conftest import wait_for
from tests.directory_users import own_user
from tests.kubernetes.conftest import kubebox

pytestmark = pytest.mark.integration
ALICE_NS = "dsportal-u-alice"
POD_S = 180  # the training image is on the nodes already: the pod runs in seconds, its script in a few more

PROBE = r"""
import json, os, socket, ssl, tempfile
import ldap3
host, plain, ldaps = os.environ["HOST"], int(os.environ["PLAIN"]), int(os.environ["LDAPS"])
tries = int(os.environ["TRIES"])
ca = tempfile.NamedTemporaryFile("w", suffix=".pem", delete=False)
ca.write(os.environ["CA"])
ca.close()
def reach(port):
    with socket.socket() as s:
        s.settimeout(5)
        try:
            s.connect((host, port))
            return "open"
        except OSError as err:
            return type(err).__name__
server = ldap3.Server(host, port=ldaps, use_ssl=True, get_info=ldap3.NONE, connect_timeout=5,
                      tls=ldap3.Tls(ca_certs_file=ca.name, validate=ssl.CERT_REQUIRED))
out = {"plain": reach(plain), "ldaps": reach(ldaps)}
anonymous = ldap3.Connection(server, auto_bind=True)
anonymous.search(os.environ["BASE"], "(objectClass=*)", attributes=["*"])
out["anonymous"] = [anonymous.result["description"], len(anonymous.entries)]
def bind(password):
    conn = ldap3.Connection(server, user=os.environ["DN"], password=password)
    conn.open(read_server_info=False)
    bound = conn.bind(read_server_info=False, controls=[("1.3.6.1.4.1.42.2.27.8.5.1", False, None)])
    control = (conn.result.get("controls") or {}).get("1.3.6.1.4.1.42.2.27.8.5.1") or {}
    conn.unbind()
    return [bound, (control.get("value") or b"").hex()]
out["wrong"] = [bind("guess") for _ in range(tries)]
out["right"] = bind(os.environ["PASSWORD"])
print(json.dumps(out))
"""


@pytest.fixture
def lockee(directory):
    """A directory user of this test's own, removed afterwards (with the lock the test put on it)."""
    with own_user(directory, 19998) as made:
        yield made


def test_a_pod_finds_only_ldaps_no_anonymous_reads_and_a_lock_after_wrong_passwords(pod_hub, kube, core, directory,
                                                                                      lockee):
    name, dn, password = lockee
    env = {"HOST": socket.gethostname(), "PLAIN": str(directory.ldap_port), "LDAPS": str(directory.ldaps_port),
           "CA": directory.ca_file.read_text(), "BASE": directory.ldap_base_dn, "DN": dn, "PASSWORD": password,
           "TRIES": str(directory.directory_max_failures)}
    pod_name = f"ldap-probe-{uuid.uuid4().hex[:6]}"
    manifest = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": pod_name, "namespace": ALICE_NS},
                "spec": {"restartPolicy": "Never", "automountServiceAccountToken": False,
                         # the name in slapd's certificate, on the bridge where the relay listens (as the hub's pod)
                         "hostAliases": [{"ip": kube.box.api_address, "hostnames": [env["HOST"]]}],
                         "containers": [{"name": "main", "image": kubebox.PORTAL.k8s_image,
                                         "imagePullPolicy": "Never", "command": ["python", "-c", PROBE],
                                         "env": [{"name": k, "value": v} for k, v in env.items()]}]}}
    core.create_namespaced_pod(ALICE_NS, manifest)
    try:
        done = wait_for(lambda: (p := core.read_namespaced_pod(pod_name, ALICE_NS)).status.phase in (
            "Succeeded", "Failed") and p, POD_S, what="the probe pod to finish")
        log = core.read_namespaced_pod_log(pod_name, ALICE_NS)
        assert done.status.phase == "Succeeded", log[-3000:]
    finally:
        try:
            core.delete_namespaced_pod(pod_name, ALICE_NS, grace_period_seconds=0)
        except k8s.ApiException:
            pass
    found = json.loads(log.strip().splitlines()[-1])
    assert found["plain"] == "ConnectionRefusedError" and found["ldaps"] == "open", found  # only LDAPS is relayed
    assert found["anonymous"] == ["unwillingToPerform", 0], found
    assert all(bound is False for bound, _ in found["wrong"]), found
    assert found["right"] == [False, "3003810101"], found  # the right password, refused: accountLocked

    session, response = pod_hub.post_login(name, password)
    assert response.status_code == 403 and ACCOUNT_LOCKED in response.text.replace("&#39;", "'"), response.text[-800:]
