"""Settings: defaults, YAML, environment, and errors that name the setting."""

import pytest

from portal.config import ConfigError, load


def test_defaults_are_the_local_demo():
    cfg = load(env={})
    assert cfg.hub_url == "http://127.0.0.1:8000"
    assert cfg.ldap_url == "ldap://127.0.0.1:3389"
    assert str(cfg.ca_file) == "/var/lib/dsportal/tls/ca.pem"
    assert cfg.gpu_quota_for(["datascientists", "gpu-users"]) == 4
    assert cfg.gpu_quota_for(["datascientists"]) == 0
    assert cfg.is_admin(["portal-admins"]) and not cfg.is_admin(["gpu-users"])
    assert cfg.group_dn("gpu-users") == "cn=gpu-users,ou=groups,dc=dsportal,dc=local"
    assert cfg.group_dn("cn=x,ou=y") == "cn=x,ou=y"


def test_yaml_then_environment(tmp_path):
    path = tmp_path / "portal.yaml"
    path.write_text("hub_port: 9000\nldap_tls: ldaps\ngpu_quota: {gpu-users: 2, big: 8}\nallowed_groups: [a, b]\n")
    cfg = load(env={"DSPORTAL_CONFIG": str(path), "DSPORTAL_HUB_PORT": "9100", "DSPORTAL_STATE_DIR": "/srv/x"})
    assert cfg.hub_port == 9100
    assert cfg.ldap_url == "ldaps://127.0.0.1:6636"
    assert cfg.gpu_quota_for(["big", "gpu-users"]) == 8
    assert cfg.allowed_groups == ("a", "b")
    assert str(cfg.slurm_conf_path) == "/srv/x/slurm/slurm.conf"
    env = load(env={"DSPORTAL_GPU_QUOTA": "gpu-users=1,admins=2", "DSPORTAL_LDAP_LOOKUP_DN": "yes"})
    assert env.gpu_quota == {"gpu-users": 1, "admins": 2} and env.ldap_lookup_dn is True


@pytest.mark.parametrize(("env", "words"), [
    ({"DSPORTAL_HUB_PORT": "http"}, "hub_port"),
    ({"DSPORTAL_HUB_PORT": "70000"}, "hub_port is 70000; allowed: 1-65535"),
    ({"DSPORTAL_LDAP_TLS": "maybe"}, "ldap_tls is 'maybe'; allowed: starttls, ldaps, none"),
    ({"DSPORTAL_SPAWNER_BACKEND": "pbs"}, "spawner_backend"),
    ({"DSPORTAL_LDAP_LOOKUP_DN": "perhaps"}, "ldap_lookup_dn"),
    ({"DSPORTAL_GPU_QUOTA": "gpu-users=-1"}, "gpu_quota[gpu-users]"),
    ({"DSPORTAL_CONFIG": "/nonexistent/portal.yaml"}, "DSPORTAL_CONFIG=/nonexistent/portal.yaml"),
])
def test_bad_settings_name_the_setting(env, words):
    with pytest.raises(ConfigError, match=words.replace("[", r"\[").replace("(", r"\(")):
        load(env=env)


def test_unknown_yaml_setting(tmp_path):
    path = tmp_path / "portal.yaml"
    path.write_text("hub_prot: 9000\n")
    with pytest.raises(ConfigError, match="unknown settings hub_prot"):
        load(env={"DSPORTAL_CONFIG": str(path)})
