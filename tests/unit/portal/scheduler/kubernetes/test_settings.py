"""The Kubernetes scheduler's section of the settings (portal/scheduler/kubernetes/settings.py): its own, checked by
its `check_section` whenever a PortalConfig is made, each refusal naming the setting and what it allows."""

from __future__ import annotations

import pytest

from portal.config import ConfigError, PortalConfig, load
from portal.scheduler.kubernetes.settings import KubernetesSettings


@pytest.mark.parametrize(("env", "words"), [
    ({"DSPORTAL_K8S_JOBS": "tfjob"}, "k8s_jobs is 'tfjob'; allowed: plain, mpijob"),
    ({"DSPORTAL_K8S_IMAGE_PULL_POLICY": "Sometimes"}, "k8s_image_pull_policy is 'Sometimes'; allowed: Always"),
    ({"DSPORTAL_K8S_NAMESPACE": "Portal_NS"}, "k8s_namespace is 'Portal_NS'; allowed: lower-case letters"),
    ({"DSPORTAL_K8S_GPU_TYPES": "t4,A100"}, "k8s_gpu_types[A100] is 'A100'; allowed: lower-case letters"),
    ({"DSPORTAL_K8S_USER_NAMESPACE_TEMPLATE": "users"}, "k8s_user_namespace_template must contain {username}"),
    ({"DSPORTAL_K8S_GPU_PROFILES": "1,2"}, "k8s_gpu_profiles is ('1', '2'); allowed: whole numbers, 0 among them"),
    ({"DSPORTAL_K8S_MAX_NODES": "0"}, "k8s_max_nodes is 0; allowed: 1 or more"),
    ({"DSPORTAL_K8S_DATA_MOUNT": "data"}, "k8s_data_mount is 'data'; allowed: an absolute path"),
])
def test_the_section_refuses_each_bad_value_naming_its_setting(env, words):
    with pytest.raises(ConfigError) as err:
        load(env=env)
    assert words in str(err.value)


def test_the_section_is_the_schedulers_own_and_part_of_every_config():
    assert issubclass(PortalConfig, KubernetesSettings) and "check_section" in vars(KubernetesSettings)
    assert PortalConfig().user_namespace("alice") == "dsportal-u-alice"
