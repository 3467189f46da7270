"""The Kubernetes spawner's pure half: the shared form with GPU profiles, and the pod settings it makes."""

from __future__ import annotations

import pytest

from portal.config import PortalConfig
from portal.scheduler.kubernetes.manifests import user_namespace_objects
from portal.scheduler.kubernetes.records import limits_for
from spawners.forms import OptionsError, parse_server_options, render_form
from spawners.kubernetes import pod_settings

CFG = PortalConfig(gpu_quota={"gpu-users": 4, "gpu-power": 8})


def cluster_limits(cfg: PortalConfig, groups: tuple[str, ...], listed=()):
    """The Kubernetes scheduler's limits (what its spawn form is a view of), from the pools `listed`."""
    return limits_for(cfg, groups, pools=lambda: listed)


def test_the_gpu_types_are_the_forms_pools_and_the_profiles_are_bounded_by_the_quota():
    limits = cluster_limits(CFG, ("gpu-users",))
    assert [p.name for p in limits.pools] == ["t4", "v100"]
    assert limits.gpu_counts(limits.pools[0]) == (0, 1, 2, 4)
    assert cluster_limits(CFG, ("gpu-power",)).gpu_counts(limits.pools[0]) == (0, 1, 2, 4, 8)
    assert cluster_limits(CFG, ("datascientists",)).gpu_counts(limits.pools[0]) == (0,)


def test_a_count_that_is_not_a_profile_is_refused_naming_the_field():
    limits = cluster_limits(CFG, ("gpu-users",))
    with pytest.raises(OptionsError) as err:
        parse_server_options({"gpus": "3"}, limits)
    assert err.value.field == "gpus" and "allowed: 0, 1, 2, 4" in str(err.value)
    with pytest.raises(OptionsError) as err:
        parse_server_options({"gpus": "8"}, limits)
    assert err.value.field == "gpus" and "quota is 4" in str(err.value)
    with pytest.raises(OptionsError) as err:
        parse_server_options({"partition": "a100"}, limits)
    assert err.value.field == "partition" and "allowed: t4, v100" in str(err.value)


def test_the_form_offers_the_profiles_as_a_choice():
    html = render_form(cluster_limits(CFG, ("gpu-users",)), pool_label="GPU type")
    assert '<select id="ds-gpus" name="gpus"' in html and 'value="4"' in html and 'value="8"' not in html
    assert ">GPU type<" in html and '<option value="v100"' in html


def test_two_v100s_become_a_gpu_limit_a_node_selector_and_a_deadline():
    options = parse_server_options({"partition": "v100", "gpus": "2", "cpus": "4", "memory_gb": "16",
                                    "runtime": "02:00:00"}, cluster_limits(CFG, ("gpu-users",)))
    settings = pod_settings(CFG, options)
    assert settings["extra_resource_limits"] == {"nvidia.com/gpu": "2"}
    assert settings["extra_resource_guarantees"] == {"nvidia.com/gpu": "2"}
    assert settings["node_selector"] == {"nvidia": "v100"}
    assert (settings["cpu_limit"], settings["mem_limit"]) == (4.0, "16G")
    assert settings["extra_pod_config"] == {"activeDeadlineSeconds": 7200}


def test_no_gpu_means_no_limit_and_any_node():
    options = parse_server_options({"gpus": "0"}, cluster_limits(CFG, ("gpu-users",)))
    settings = pod_settings(CFG, options)
    assert settings["extra_resource_limits"] == {} and settings["node_selector"] == {}


def test_a_users_namespace_binds_the_user_and_their_pods_and_caps_their_gpus():
    binding, quota = user_namespace_objects(CFG, "alice", 4)
    assert binding["metadata"]["namespace"] == "dsportal-u-alice"
    assert binding["roleRef"]["name"] == "dsportal-user"
    assert {(s["kind"], s["name"]) for s in binding["subjects"]} == {("User", "dsportal:alice"),
                                                                     ("ServiceAccount", "default")}
    assert quota["spec"]["hard"] == {"requests.nvidia.com/gpu": "4"}


def test_the_spawn_returns_once_the_servers_port_answers_not_before():
    """The pod runs before JupyterLab listens; the spawn waits for the port (so that the hub's first check finds the
    server up) and gives up after http_timeout, leaving the hub's wait to say so."""
    import asyncio
    import socket
    import time
    import types

    from spawners.kubernetes import PortalKubeSpawner

    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()

    async def listen_later() -> float:
        await asyncio.sleep(0.3)
        server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", port)
        opened = time.monotonic()
        waited = asyncio.ensure_future(asyncio.sleep(1))
        await waited
        server.close()
        return opened

    async def both() -> tuple[float, float]:
        later = asyncio.ensure_future(listen_later())
        await PortalKubeSpawner._answering(types.SimpleNamespace(http_timeout=10), f"http://127.0.0.1:{port}")
        answered = time.monotonic()
        return answered, await later

    answered, opened = asyncio.run(both())
    assert 0 <= answered - opened < 0.5
    started = time.monotonic()
    asyncio.run(PortalKubeSpawner._answering(types.SimpleNamespace(http_timeout=0.3), f"http://127.0.0.1:{port}"))
    assert 0.25 < time.monotonic() - started < 3  # nobody listens: bounded by http_timeout
    asyncio.run(PortalKubeSpawner._answering(types.SimpleNamespace(http_timeout=10), ("198.18.0.9", 8888)))  # no URL


def test_the_forms_pools_come_from_the_nodes_the_hub_lists_and_the_default_server_fits_them():
    from portal.scheduler.kubernetes.nodes import node_pools

    def two_cpus(name: str) -> dict:  # a node of the Kubernetes test box: the machine's 2 CPUs
        return {"metadata": {"name": name, "labels": {CFG.k8s_gpu_node_label: "t4"}}, "spec": {},
                "status": {"allocatable": {"cpu": "2", "memory": "8Gi", "nvidia.com/gpu": "2"},
                           "conditions": [{"type": "Ready", "status": "True"}]}}
    hub = {"metadata": {"name": "hub", "namespace": "dsportal"}, "status": {"phase": "Running"},
           "spec": {"nodeName": "n1", "containers": [{"resources": {"requests": {"cpu": "100m", "memory": "512Mi"}}}]}}
    listed = node_pools([two_cpus("n1"), two_cpus("n2")], [hub], CFG.k8s_gpu_node_label, CFG.k8s_gpu_types,
                        CFG.namespace_user)
    limits = cluster_limits(CFG, ("gpu-users",), listed=listed)
    t4, v100 = limits.pools
    assert (t4.cpus_per_node, t4.memory_mb_per_node, t4.gpus_per_node, t4.free_gpus_per_node) == (2, 8192, 2, 2)
    assert v100.cpus_per_node == CFG.k8s_node_cpus  # no node of that type is listed: the configured shape
    options = parse_server_options({"partition": "t4"}, limits)
    assert options.cpus <= 2 and options.memory_gb <= 8  # the default server fits the node without the hub's pod


def test_kubespawner_still_makes_the_namespace_where_the_portal_makes_it_theirs():
    """PortalKubeSpawner._ensure_namespace extends a private method of KubeSpawner's (its docstring says why no
    public hook fits): KubeSpawner's start must still call it, before it creates the pod."""
    import inspect

    from kubespawner import KubeSpawner

    from spawners.kubernetes import PortalKubeSpawner

    source = inspect.getsource(KubeSpawner._start)
    assert "await self._ensure_namespace()" in source
    assert source.index("_ensure_namespace()") < source.index("_make_create_pod_request")
    assert "_start" not in vars(PortalKubeSpawner) and "start" in vars(PortalKubeSpawner)


def test_the_portals_own_spawner_attributes_shadow_no_trait_of_the_spawners_they_extend():
    """A class attribute of the mixin's named like a trait of KubeSpawner's or batchspawner's replaces that trait
    (a `scheduler_name = "kubernetes"` once made every server pod wait for a scheduler of that name)."""
    from batchspawner import SlurmSpawner
    from kubespawner import KubeSpawner

    from spawners.kubernetes import PortalKubeSpawner
    from spawners.options import ServerOptionsMixin
    from spawners.slurm import PortalSlurmSpawner

    own = {name for name, value in vars(ServerOptionsMixin).items() if not callable(value)
           and not name.startswith("_")} | {"portal_scheduler", "pool_label", "start_note"}
    assert not own & (set(KubeSpawner.class_trait_names()) | set(SlurmSpawner.class_trait_names())), own
    assert PortalKubeSpawner.scheduler_name.default_value == KubeSpawner.scheduler_name.default_value
    assert PortalSlurmSpawner.portal_scheduler == "slurm" and PortalKubeSpawner.portal_scheduler == "kubernetes"


def test_a_servers_start_makes_the_namespace_theirs_through_the_scheduler_after_kubespawners_own(monkeypatch):
    """One owner of a user's namespace (portal.scheduler.kubernetes.namespaces.ensure_namespace): the spawner asks
    the Kubernetes scheduler for it, as the user's person, once KubeSpawner has made the namespace."""
    import asyncio
    import types

    from kubespawner import KubeSpawner

    from portal.scheduler.kubernetes.scheduler import KubernetesScheduler
    from spawners.kubernetes import PortalKubeSpawner

    done: list[object] = []

    async def kubespawners_own(self) -> None:
        done.append("namespace made")

    class Recording(KubernetesScheduler):  # no API server: what it is asked for
        def ensure_namespace(self, user) -> None:
            done.append((user.name, user.groups, user.is_caller))

    monkeypatch.setattr(KubeSpawner, "_ensure_namespace", kubespawners_own)
    spawner = PortalKubeSpawner.__new__(PortalKubeSpawner)
    spawner.user = types.SimpleNamespace(name="alice", groups=[types.SimpleNamespace(name=g)
                                                               for g in ("gpu-users", "datascientists")])
    spawner.scheduler = lambda: Recording(CFG)  # type: ignore[method-assign]
    asyncio.run(spawner._ensure_namespace())
    assert done == ["namespace made", ("alice", ("datascientists", "gpu-users"), False)]


def test_a_servers_pod_mounts_the_sites_programs_and_its_job_api_registers_them():
    """A site's own programs (portal.config_programs) in a user's server: its notebooks' job API registers them
    from the same claim the training pods mount; with none, the pod is as before."""
    import dataclasses
    import types

    from spawners.kubernetes import PortalKubeSpawner

    site = types.SimpleNamespace(portal=dataclasses.replace(
        CFG, site_python_path="/opt/site-programs", site_programs=("ourprogram.program",),
        k8s_site_programs_claim="site-programs"))
    assert {"name": "site-programs", "persistentVolumeClaim": {"claimName": "site-programs", "readOnly": True}} \
        in PortalKubeSpawner._volumes_default(site)
    assert {"name": "site-programs", "mountPath": "/opt/site-programs", "readOnly": True} \
        in PortalKubeSpawner._mounts_default(site)
    environment = PortalKubeSpawner._environment_default(site)
    assert (environment["DSPORTAL_SITE_PYTHON_PATH"], environment["DSPORTAL_SITE_PROGRAMS"],
            environment["DSPORTAL_SITE_LAUNCHERS"]) == ("/opt/site-programs", "ourprogram.program", "")
    plain = types.SimpleNamespace(portal=CFG)
    assert all(volume["name"] != "site-programs" for volume in PortalKubeSpawner._volumes_default(plain))
    assert not any(name.startswith("DSPORTAL_SITE_") for name in PortalKubeSpawner._environment_default(plain))
