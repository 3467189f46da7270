"""The hub as a site runs it on Kubernetes: in a pod of the test box (deploy/kubernetes/kubeparts/hub.py), from the
hub image, with values.yaml's settings, its own service account, and the test box's directory through the LDAP
relay. The box's Prometheus reads the hub and the portal in it, and its Operations page draws what it kept. alice
logs in through the NodePort, spawns, reaches JupyterLab (whose server asks the dashboard for her lab's GPU figures),
her TensorBoard and the dashboard; then the hub's pod is deleted: the Deployment makes another, and alice's server,
never stopped, answers through the new pod's proxy to the cookie she had."""

from __future__ import annotations

import re
import time

import pytest
import requests
from kubernetes import client as k8s

from deploy import prometheus_server
from portal.notebook import TENSORBOARD_START_TIMEOUT_S
from tests.conftest import page_error, wait_for
from tests.integration.helpers import portal_client
from tests.kubernetes.conftest import kubebox

pytestmark = pytest.mark.integration
ALICE_NS = "dsportal-u-alice"
SPAWN_S = 150  # the hub's own start_timeout (values.yaml leaves the default, 120 s), and its verdict
HUB_BACK_S = 120  # a new hub pod: scheduled, the hub and its proxy started, the readiness probe passed (~20 s)



def hub_pod(core) -> k8s.V1Pod | None:
    """The hub's one Ready pod, if there is one now."""
    ready = [p for p in kubebox.box_hub.hub_pods(core) if p.metadata.deletion_timestamp is None and any(
        c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])]
    return ready[0] if len(ready) == 1 else None


def lab_answers(session: requests.Session, url: str) -> bool:
    """False while no answer gets through: refused, reset, or a read timeout while the new hub pod comes up."""
    try:
        answer = session.get(f"{url}/user/alice/lab", timeout=10)
    except requests.RequestException:
        return False
    return answer.status_code == 200 and "JupyterLab" in answer.text


def test_the_hub_pod_runs_with_the_helm_values_and_its_own_service_account(pod_hub, kube, core):
    pod = hub_pod(core)
    assert pod is not None
    assert pod.spec.service_account_name == "dsportal-hub"
    assert pod.spec.node_name.startswith(f"{kube.box.name}-node")
    env = {e.name: e.value for e in pod.spec.containers[0].env}
    values = kubebox.box_hub.values_env()
    assert env["DSPORTAL_SCHEDULER"] == values["DSPORTAL_SCHEDULER"] == "kubernetes"
    assert env["DSPORTAL_GPU_QUOTA"] == values["DSPORTAL_GPU_QUOTA"]
    service = k8s.CoreV1Api(core.api_client).read_namespaced_service("hub", "dsportal")
    assert env["DSPORTAL_HUB_CONNECT_IP"] == service.spec.cluster_ip
    assert pod_hub.get("/hub/health").status_code == 200


def test_the_hub_is_served_over_https_with_the_boxs_ca_and_secure_cookies(pod_hub, kube):
    """A secure context, as on a site: the browser offers notifications and the cookies are Secure."""
    assert pod_hub.url.startswith("https://"), pod_hub.url
    with pytest.raises(requests.exceptions.SSLError):  # not a certificate anyone's browser trusts by itself
        requests.get(f"{pod_hub.url}/hub/health", timeout=10)
    plain = pod_hub.url.replace("https://", "http://", 1)
    with pytest.raises(requests.RequestException):  # no plain HTTP beside it
        requests.get(f"{plain}/hub/health", timeout=10).raise_for_status()
    alice = pod_hub.login("alice")
    cookies = {cookie.name: cookie for cookie in alice.cookies}
    assert "jupyterhub-session-id" in cookies, list(cookies)
    assert all(cookie.secure for cookie in cookies.values()), [(c.name, c.secure) for c in cookies.values()]
    # HSTS on every answer over TLS (portal/proxy_hsts.js in the proxy): the hub's pages and API, the proxy's own
    # error, the dashboard's page, which also keeps its nonce policy behind the proxy.
    answers = {path: pod_hub.get(path, allow_redirects=False) for path in ("/hub/health", "/hub/login", "/hub/api/",
                                                                          "/user/nobody-here/x")}
    answers["dashboard"] = alice.get(f"{pod_hub.url}/services/portal/jobs", timeout=30)
    for name, answer in answers.items():
        assert answer.headers.get("Strict-Transport-Security") == "max-age=31536000", (name, answer.status_code,
                                                                                     dict(answer.headers))
    dashboard = answers["dashboard"]
    assert dashboard.status_code == 200 and dashboard.url.endswith("/services/portal/jobs"), dashboard.url
    assert "script-src 'self' 'nonce-" in dashboard.headers["Content-Security-Policy"], dashboard.headers


def test_the_boxs_prometheus_scrapes_the_pod_hub_and_its_dashboard_draws_the_operations_page(pod_hub, kube):
    """Through the NodePort with the token the hub registered from its Secret; the dashboard in the hub's pod reads
    it back on the bridge with the reader from the same Secret."""
    base, data = kubebox.box_prometheus.url(kube.box), kubebox.box_prometheus.data_dir(kube.box)
    assert requests.get(f"{base}/api/v1/query", params={"query": "up"}, timeout=10).status_code == 401
    up = wait_for(lambda: (found := prometheus_server.targets_up(data, base)) == {"hub": 1.0, "portal": 1.0} and found,
                  90, what="the box's Prometheus to read the hub and the portal in the hub's pod")
    assert up == {"hub": 1.0, "portal": 1.0}
    page = portal_client(pod_hub, "admin").get(f"{pod_hub.url}/services/portal/operations", timeout=60)
    assert page.status_code == 200 and 'id="operations-error"' not in page.text, page.text[-3000:]
    charts = re.findall(r'<svg class="curves"[^>]* aria-label="([^"]*)"', page.text)
    assert any(label.startswith("Targets scraped for 2 series") and "portal: " in label for label in charts), charts


def test_alice_spawns_through_the_pod_hub_and_her_server_outlives_the_hub_pod(pod_hub, kube, core):
    alice = pod_hub.login("alice")  # the directory, through the relay on the box's bridge
    form = pod_hub.spawn_form(alice, partition="t4", gpus="1", cpus="1", memory_gb="2", runtime="01:00:00")
    assert form.status_code in (200, 302), (page_error(form), kubebox.box_hub.hub_log(core)[-4000:])
    try:
        events = pod_hub.client(alice).progress_events("alice", SPAWN_S)
        assert events[-1].get("ready"), (events, kubebox.box_hub.hub_log(core))
        server_pod = core.read_namespaced_pod("jupyter-alice", ALICE_NS)
        assert server_pod.status.phase == "Running"
        assert lab_answers(alice, pod_hub.url)
        # Her lab's GPU figures: her server asks the dashboard in the hub's pod (through the hub's Service, both
        # NetworkPolicies letting it) with its own token, for what is hers (portal.lab_gpus).
        xsrf = alice.cookies.get("_xsrf", path="/user/alice/") or alice.cookies.get("_xsrf") or ""
        gpus = alice.get(f"{pod_hub.url}/user/alice/dsportal/gpus", headers={"X-XSRFToken": xsrf}, timeout=60)
        assert gpus.status_code == 200 and "server_gpus" in gpus.json(), (gpus.status_code, gpus.text[-2000:])
        # TensorBoard over her ~/jobs, in her pod, through jupyter-server-proxy (it starts on the first request).
        board = wait_for(lambda: (a := alice.get(f"{pod_hub.url}/user/alice/tensorboard/data/environment",
                                                 timeout=60)).ok and a.json(), TENSORBOARD_START_TIMEOUT_S + 30,
                         what="her TensorBoard")
        assert board["data_location"].endswith("/jobs"), board
        # The dashboard in the hub's pod acts for alice with the pod's service account: it counts her server.
        portal = portal_client(pod_hub, "alice")
        answers = []

        def counted() -> bool:
            answers.append(portal.get(f"{portal.base}usage", timeout=30))
            return answers[-1].ok and answers[-1].json()["quotas"][0]["gpus_in_use"] == 1
        try:
            wait_for(counted, 60, what="the dashboard in the hub's pod to count her server")
        except TimeoutError as err:
            last = f"{answers[-1].status_code} {answers[-1].text[-2000:]}" if answers else "none got through"
            raise AssertionError(f"{err}; its last answer: {last}\n{kubebox.box_hub.hub_log(core)[-4000:]}") from None

        old = hub_pod(core)
        assert old is not None
        core.delete_namespaced_pod(old.metadata.name, "dsportal")
        deleted = time.monotonic()
        new = wait_for(lambda: (p := hub_pod(core)) and p.metadata.name != old.metadata.name and p, HUB_BACK_S,
                       what="the Deployment's new hub pod to be ready")
        wait_for(lambda: lab_answers(alice, pod_hub.url), 60,
                 what="alice's JupyterLab through the new hub pod's proxy, with her cookie")
        print(f"hub pod {old.metadata.name} deleted; {new.metadata.name} on {new.spec.node_name} routes to "
              f"alice's server again {time.monotonic() - deleted:.1f} s later")
        # Her server was never stopped: the same pod, and the new hub knows it as ready.
        assert core.read_namespaced_pod("jupyter-alice", ALICE_NS).metadata.uid == server_pod.metadata.uid
        # The proxy may route to her server before the new hub's API answers (a 503 from the proxy meanwhile).
        assert wait_for(lambda: pod_hub.server(alice, "alice")["ready"], 60,
                        what="the new hub pod to know her server as ready")
    finally:
        admin = pod_hub.login("admin")
        pod_hub.api(admin, "DELETE", "users/alice/server")
        wait_for(lambda: not core.list_namespaced_pod(ALICE_NS, field_selector="metadata.name=jupyter-alice").items,
                 90, what="alice's pod to be deleted")
