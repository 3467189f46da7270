"""The hub's pod in the Kubernetes box (deploy/kubernetes/kubeparts/hub.py), built without a cluster: values.yaml's
environment with the box's values over it, objects that the API server's schema accepts, the LDAP relay's command
and what `install` records. The hub running in a box's pod: tests/kubernetes/test_hub_in_a_pod.py."""

from __future__ import annotations

import runpy
import subprocess

import kubernetes_validate
import pytest
from traitlets.config import Config

from deploy.kubernetes import kubebox
from deploy.kubernetes.kubeparts import gpus, hub, relay
from deploy.kubernetes.kubeparts.layout import KubeBox
from deploy.supervise import BoxError
from portal.config import PortalConfig, load
from tests.conftest import REPO
from tests.unit.helpers import KUBERNETES_VERSIONS

LDAP = {"ldaps_port": 6636, "ldap_base_dn": "dc=dsportal,dc=local", "ldap_search_user": "cn=portal,ou=services,dc=x",
        "ldap_bind_dn_template": "uid={username},ou=people,dc=dsportal,dc=local",
        "ldap_user_search_base": "ou=people,dc=dsportal,dc=local",
        "ldap_group_search_base": "ou=groups,dc=dsportal,dc=local"}


def test_the_hub_gets_the_helm_values_with_the_boxs_over_them(tmp_path):
    box = KubeBox(tmp_path)
    env = hub.box_env(box, "198.19.1.10", LDAP)
    values = hub.values_env()
    assert env["DSPORTAL_SCHEDULER"] == values["DSPORTAL_SCHEDULER"] == "kubernetes"
    assert env["DSPORTAL_GPU_QUOTA"] == values["DSPORTAL_GPU_QUOTA"]  # a value the box does not change
    changed = {k for k in values if values[k] != env[k]}
    assert changed <= set(hub.BOX_VALUES), changed - set(hub.BOX_VALUES)  # each change says why
    added = set(env) - set(values)
    assert added <= set(hub.BOX_EXTRA), added - set(hub.BOX_EXTRA)
    assert env["DSPORTAL_HUB_CONNECT_IP"] == "198.19.1.10" and env["DSPORTAL_STATE_DIR"] == hub.STATE_MOUNT


def test_the_hubs_objects_are_valid(tmp_path):
    box = KubeBox(tmp_path)
    objects = [*hub.hub_services(), *hub.hub_objects(box, hub.box_env(box, "198.19.1.10", LDAP), "PEM", "id")]
    for manifest in objects:
        for version in KUBERNETES_VERSIONS:
            kubernetes_validate.validate(manifest, version, strict=True)
    (deployment,) = [m for m in objects if m["kind"] == "Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "dsportal-hub" and pod["hostAliases"][0]["ip"] == box.api_address
    # Not starved by a user's busy pod on its node (a request is a CPU weight: 100m was a tenth of one such pod's),
    # and not dropped from its Service for one answer slower than a second.
    (container,) = pod["containers"]
    assert container["resources"]["requests"]["cpu"] == "500m"
    assert container["readinessProbe"]["timeoutSeconds"] >= 5 and container["readinessProbe"]["failureThreshold"] > 1
    (proxy,) = [m for m in objects if m["metadata"]["name"] == "proxy-public"]
    assert proxy["spec"]["ports"][0]["nodePort"] == hub.NODE_PORT


def test_the_proxy_serves_https_with_a_certificate_from_the_boxs_ca_for_every_node(tmp_path):
    box = KubeBox(tmp_path)
    box.path("tls").mkdir(parents=True)
    cert, key = hub.ensure_tls(box)
    assert cert.startswith("-----BEGIN CERTIFICATE-----") and "PRIVATE KEY" in key
    checked = subprocess.run(["openssl", "verify", "-CAfile", str(box.ca_file), str(box.path("tls", "hub.pem"))],
                             capture_output=True, text=True)
    assert checked.returncode == 0, checked.stderr
    names = subprocess.run(["openssl", "x509", "-noout", "-ext", "subjectAltName", "-in",
                            str(box.path("tls", "hub.pem"))], capture_output=True, text=True, check=True).stdout
    assert all(f"IP Address:{node.address}" in names for node in box.node_network.nodes), names
    assert hub.ensure_tls(box) == (cert, key)  # made once
    box.path("tls", "hub.names").write_text("IP:198.19.9.9")  # the nodes' addresses changed: made again
    assert hub.ensure_tls(box)[0] != cert
    env = hub.box_env(box, "198.19.1.10", LDAP)
    (deployment,) = [m for m in hub.hub_objects(box, env, "PEM", "id", (cert, key)) if m["kind"] == "Deployment"]
    (mount,) = [m for m in deployment["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
                if m["name"] == "tls"]
    assert env["DSPORTAL_HUB_SSL_CERT"] == f"{mount['mountPath']}/tls.crt" and hub.url(box).startswith("https://")


def test_install_records_the_directory_and_the_relay_serves_the_pods_range_only(tmp_path):
    box = KubeBox(tmp_path / "kube")
    assert hub.installed(box) is None
    with pytest.raises(BoxError, match="not installed"):
        relay.relay_command(box)
    ca, password = tmp_path / "ca.pem", tmp_path / "search-password"
    settings = PortalConfig(ldap_ca_file=str(ca), ldap_search_password_file=str(password), ldaps_port=16636)
    with pytest.raises(BoxError, match="start the directory first"):
        hub.install(box, settings)
    ca.write_text("PEM")
    password.write_text("sesame\n")
    hub.install(box, settings)
    assert hub.installed(box)["ldaps_port"] == 16636 and hub.ca_file(box).read_text() == "PEM"
    assert hub.search_password_copy(box).stat().st_mode & 0o777 == 0o600
    command = relay.relay_command(box)  # LDAPS only: no port that speaks plain LDAP reaches the pods
    assert f"TCP-LISTEN:16636,bind={box.api_address},reuseaddr,fork,range={box.cluster_cidr}" in command
    assert command[-1] == "TCP:127.0.0.1:16636"
    env = hub.box_env(box, "198.19.1.10", hub.installed(box))
    assert env["DSPORTAL_LDAP_TLS"] == "ldaps" and env["DSPORTAL_LDAPS_PORT"] == "16636"
    (secret,) = [m for m in hub.hub_objects(box, env, "PEM", "id", search_password="sesame")
                 if m["metadata"]["name"] == "dsportal-ldap-search"]
    assert secret["stringData"] == {"password": "sesame"}
    assert env["DSPORTAL_LDAP_SEARCH_PASSWORD_FILE"] == f"{hub.SEARCH_MOUNT}/password"
    directory = hub.directory_file(box)
    directory.write_text('{"ldap_port": 13389}')  # installed before the relay spoke LDAPS only
    with pytest.raises(BoxError, match="install the hub again"):
        relay.relay_command(box)


def test_the_boxs_hub_settings_reach_the_hub_and_its_nodes_gpu_readers_read_into_its_claim(tmp_path):
    """The test box's short GPU watch: in the hub's environment (as its portal reads it), and each node's reader,
    run while the hub is installed, reads as often into the hub's claim, as the hub's service account."""
    box = KubeBox(tmp_path / "kube", hub_settings=(("gpu_idle_s", "watched=10,other=0"), ("gpu_read_every_s", "5")))
    env = hub.box_env(box, "198.19.1.10", LDAP)
    settings = load({"DSPORTAL_GPU_IDLE_S": env["DSPORTAL_GPU_IDLE_S"],
                     "DSPORTAL_GPU_READ_EVERY_S": env["DSPORTAL_GPU_READ_EVERY_S"]})
    assert (settings.gpu_idle_s, settings.gpu_read_every_s) == ({"watched": 10, "other": 0}, 5)
    assert "gpus-" not in " ".join(svc.name for svc in kubebox.services(box))  # no hub: no reader
    hub.directory_file(box).parent.mkdir(parents=True)
    hub.directory_file(box).write_text('{"ldaps_port": 16636}')
    readers = [svc for svc in kubebox.services(box) if svc.name.startswith("gpus-")]
    assert [svc.name for svc in readers] == [f"gpus-{node.name}" for node in box.node_network.nodes]
    command = readers[0].command(box)
    assert command[command.index("--out") + 1] == str(hub.state_dir(box) / "gpus")  # the pod's <state_dir>/gpus
    assert command[command.index("--every") + 1] == "5" and command[command.index("--gpus") + 1] == "4"
    reader_env = readers[0].env(box)
    assert reader_env["DSPORTAL_SCHEDULER"] == "kubernetes"
    assert reader_env["DSPORTAL_K8S_KUBECONFIG"] == str(box.kubeconfig("hub"))
    assert gpus.every_s(KubeBox(tmp_path / "other")) == str(PortalConfig().gpu_read_every_s)


def test_the_dashboard_service_gets_the_pods_api_server_address(monkeypatch):
    """In a pod, the hub passes its services the in-cluster client's address of the API server, and nothing else
    of its environment but the portal's settings."""
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "198.19.1.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    monkeypatch.setenv("SOMETHING_ELSE", "secret")
    config = Config()
    runpy.run_path(str(REPO / "jupyterhub_config.py"), init_globals={"get_config": lambda: config})
    (portal,) = [s for s in config.JupyterHub.services if s["name"] == "portal"]
    assert portal["environment"]["KUBERNETES_SERVICE_HOST"] == "198.19.1.1"
    assert portal["environment"]["KUBERNETES_SERVICE_PORT"] == "443"
    assert "SOMETHING_ELSE" not in portal["environment"] and "PATH" not in portal["environment"]


def test_the_boxs_identities_are_the_users_the_portal_impersonates_and_binds(tmp_path):
    from deploy.kubernetes.kubeparts.identities import static_identities
    from deploy.kubernetes.kubeparts.layout import PORTAL, USERS_GROUP, user_principal
    from portal.scheduler.kubernetes.manifests import user_role_binding

    ids = static_identities(KubeBox(tmp_path))
    assert ids["alice"] == (PORTAL.user_principal("alice"), [USERS_GROUP]) == (user_principal("alice"), [USERS_GROUP])
    assert ids["alice"][0] in [subject["name"] for subject in user_role_binding(PORTAL, "alice")["subjects"]]
