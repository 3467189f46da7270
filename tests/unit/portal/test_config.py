"""Settings: defaults, YAML, environment, where each value came from, errors that name the setting, renamed settings,
and docs/configuration.md generated from them."""

import dataclasses
import json
import logging
import subprocess
import sys

import pytest

from portal.config import ConfigError, PortalConfig, load
from portal.config_cli import main, markdown_page, markdown_table
from portal.config_values import ACCEPTS, RENAMED
from tests.conftest import REPO

CONFIGURATION_PAGE = REPO / "docs" / "configuration.md"


def test_defaults_are_the_local_demo():
    cfg = load(env={})
    assert cfg.hub_url == "http://127.0.0.1:8000"
    assert cfg.ldap_url == "ldap://127.0.0.1:3389"
    assert str(cfg.ca_file) == "/var/lib/dsportal-directory/tls/ca.pem"
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
    ({"DSPORTAL_SCHEDULER": "pbs"}, "scheduler is 'pbs'; allowed: slurm, kubernetes"),
    ({"DSPORTAL_LDAP_LOOKUP_DN": "perhaps"}, "ldap_lookup_dn"),
    ({"DSPORTAL_GPU_QUOTA": "gpu-users=-1"}, "gpu_quota[gpu-users]"),
    ({"DSPORTAL_GPU_IDLE_S": "gpu-users=-5"}, "gpu_idle_s[gpu-users] is -5; allowed: 0 or more"),
    ({"DSPORTAL_GPU_IDLE_GRACE_S": "-1"}, "gpu_idle_grace_s is -1; allowed: 0 or more"),
    ({"DSPORTAL_GPU_IDLE_S": "gpu-users=lots"}, "gpu_idle_s is 'gpu-users=lots'; allowed: group: N"),
    ({"DSPORTAL_CONFIG": "/nonexistent/portal.yaml"}, "DSPORTAL_CONFIG=/nonexistent/portal.yaml"),
    ({"DSPORTAL_CLUSTER_NAME": "gpu-2"}, "cluster_name is 'gpu-2'; allowed: a lower-case letter"),
    ({"DSPORTAL_CLUSTER_NAME": "jobs"}, "cluster_name is 'jobs'; allowed: a lower-case letter, then up to 39 "
                                        "lower-case letters, digits or '_', other than 'jobs'"),
    ({"DSPORTAL_SERVER_ENVIRONMENT": "1X=a"}, "server_environment has '1X=a'; allowed: NAME=value items"),
    ({"DSPORTAL_USER_NOTEBOOKS_DIR": "../x"}, "user_notebooks_dir is '../x'; allowed: a directory inside"),
    ({"DSPORTAL_HUB_SSL_CERT": "/etc/hub.pem"}, "hub_ssl_cert is set and hub_ssl_key is not; allowed: both"),
    ({"DSPORTAL_HUB_SSL_KEY": "/etc/hub.key"}, "hub_ssl_key is set and hub_ssl_cert is not"),
])
def test_bad_settings_name_the_setting(env, words):
    with pytest.raises(ConfigError, match=words.replace("[", r"\[").replace("(", r"\(")):
        load(env=env)


def yaml_file(tmp_path, text: str) -> dict[str, str]:
    path = tmp_path / "portal.yaml"
    path.write_text(text)
    return {"DSPORTAL_CONFIG": str(path)}


def test_unknown_yaml_setting_suggests_close_names(tmp_path):
    with pytest.raises(ConfigError, match="unknown setting 'hub_prot'; did you mean hub_port"):
        load(env=yaml_file(tmp_path, "hub_prot: 9000\n"))
    with pytest.raises(ConfigError, match="unknown setting 'colour'; `python -m portal.config` lists the settings"):
        load(env=yaml_file(tmp_path, "colour: blue\n"))


def test_sources_say_default_yaml_or_environment(tmp_path):
    env = {**yaml_file(tmp_path, "hub_port: 9000\nldap_host: ldap.example.org\n"), "DSPORTAL_HUB_PORT": "9100"}
    sources = load(env=env).sources()
    assert sources["hub_port"] == "environment DSPORTAL_HUB_PORT"
    assert sources["ldap_host"] == f"YAML file {env['DSPORTAL_CONFIG']}"
    assert sources["ldap_tls"] == "default"
    assert set(sources) == {f.name for f in dataclasses.fields(PortalConfig)}
    assert PortalConfig(hub_port=9000).sources()["hub_port"] == "code"  # not through load()
    assert set(load(env={}).sources().values()) == {"default"}


@pytest.mark.parametrize(("text", "words"), [
    ("hub_port: abc", "hub_port is 'abc'; allowed: a whole number (from YAML file"),
    ("hub_port: yes", "hub_port is True; allowed: a whole number (YAML reads an unquoted yes"),
    ("start_timeout: 2.5", "start_timeout is 2.5; allowed: a whole number"),
    ("gpu_quota: 5", "gpu_quota is 5; allowed: group: N pairs"),
    ("gpu_quota: {gpu-users: many}", "gpu_quota is {'gpu-users': 'many'}; allowed: group: N pairs"),
    ("ldap_lookup_dn: 7", "ldap_lookup_dn is 7; allowed: true or false"),
    ("ldap_host:", "ldap_host is None; allowed: text (YAML reads an empty value as null"),
    ("ldap_host: [a, b]", "ldap_host is ['a', 'b']; allowed: text"),
    ("allowed_groups: {a: 1}", "allowed_groups is {'a': 1}; allowed: a list"),
    ("venv: ''", "venv is ''; allowed: a path"),
    ("ldap_tls: sometimes", "ldap_tls is 'sometimes'; allowed: starttls, ldaps, none (from YAML file"),
    ("hub_port: [", "not a YAML file (line 2)"),
    ("- hub_port", "expected a mapping of settings"),
])
def test_bad_yaml_values_name_the_setting_and_what_it_accepts(tmp_path, text, words):
    with pytest.raises(ConfigError) as err:
        load(env=yaml_file(tmp_path, text + "\n"))
    assert words in str(err.value)


def test_bad_environment_values_say_where_they_were_set():
    with pytest.raises(ConfigError, match=r"gpu_quota is 'gpu-users'; allowed: .*\(from environment DSPORTAL_GPU_Q"):
        load(env={"DSPORTAL_GPU_QUOTA": "gpu-users"})
    with pytest.raises(ConfigError, match=r"hub_port is 0; allowed: 1-65535 \(from environment DSPORTAL_HUB_PORT\)"):
        load(env={"DSPORTAL_HUB_PORT": "0"})


def test_errors_echo_only_a_prefix_and_never_a_secret(tmp_path):
    with pytest.raises(ConfigError) as err:
        load(env={"DSPORTAL_HUB_PORT": "9" * 30 + "x" * 1000})
    assert len(str(err.value)) < 200
    with pytest.raises(ConfigError) as err:
        load(env=yaml_file(tmp_path, "ldap_search_password: [hunter2]\n"))
    assert "ldap_search_password is (hidden)" in str(err.value) and "hunter2" not in str(err.value)


def test_listing_hides_secrets_and_shows_sources(tmp_path, capsys):
    env = {**yaml_file(tmp_path, "gpu_quota: {big: 8}\n"), "DSPORTAL_LDAP_SEARCH_PASSWORD": "hunter2"}
    assert main(["--json"], env=env) == 0
    rows = {row["name"]: row for row in json.loads(capsys.readouterr().out)}
    assert rows["ldap_search_password"]["value"] == "(set)" and rows["ldap_search_password"]["default"] == "(empty)"
    assert rows["gpu_quota"] == {**rows["gpu_quota"], "type": "group=N map", "default": "gpu-users=4",
                                 "value": "big=8", "source": f"YAML file {env['DSPORTAL_CONFIG']}"}
    assert rows["hub_port"]["source"] == "default" and rows["hub_port"]["help"]
    assert main(["--changed"], env={**env, "DSPORTAL_HUB_PROT": "1"}) == 0
    out, err = capsys.readouterr()
    assert "hunter2" not in out and "ldap_search_password (text) = (set)" in out and "hub_port" not in out
    assert "DSPORTAL_HUB_PROT is not a setting; did you mean DSPORTAL_HUB_PORT?" in err


def test_the_hubs_url_says_https_when_the_proxy_has_a_certificate():
    assert load(env={}).hub_url == "http://127.0.0.1:8000"
    served = load(env={"DSPORTAL_HUB_SSL_CERT": "/etc/hub.pem", "DSPORTAL_HUB_SSL_KEY": "/etc/hub.key"})
    assert served.hub_url == "https://127.0.0.1:8000"


def test_every_setting_explains_itself():
    for f in dataclasses.fields(PortalConfig):
        assert str(f.type) in ACCEPTS, f.name
        assert len(f.metadata["help"]) > 10 and f.metadata["help"].endswith((".", ")")), f.name
    secrets = [f.name for f in dataclasses.fields(PortalConfig) if f.metadata["secret"]]
    assert secrets == ["ldap_search_password"]


def test_the_configuration_page_is_generated_from_the_settings_and_the_hub_classes():
    page = CONFIGURATION_PAGE.read_text()
    assert page == markdown_page(), "docs/configuration.md is stale: python -m portal.config --markdown > it"
    assert markdown_table() in page
    assert markdown_table().count("\n| `") == len(dataclasses.fields(PortalConfig))
    kube = page[page.index("### Kubernetes (scheduler: kubernetes)"):page.index("### GPU use (docs/gpus.md)")]
    assert "| `k8s_image` |" in kube and "| `k8s_image` |" not in page[:page.index("### Kubernetes")]
    assert "| `default_gpu_idle_s` | int | `1800` |" in page[page.index("### GPU use"):]
    hub = page[page.index("## Hub settings (set in jupyterhub_config.py as `c.<Class>.<name>`)"):]
    assert "| `c.PortalLDAPAuthenticator.failed_login_limit_per_user_client` | int | `5` |" in hub
    assert "| `c.SlurmStateSpawner.startup_check_timeout` | float | `2.0` |" in hub
    ties = page[page.index("## Hub traits that are settings"):page.index("## Hub settings")]
    assert "| `c.LDAPAuthenticator.server_address` | `ldap_host` |" in ties
    assert "| `c.Spawner.start_timeout` | `start_timeout` |" in ties and "server_address" not in hub


def test_gpu_quota_says_it_counts_everything_a_user_runs():
    helps = {f.name: f.metadata["help"] for f in dataclasses.fields(PortalConfig)}
    for name in ("gpu_quota", "default_gpu_quota"):
        assert "servers and jobs together" in helps[name] or "all their training jobs" in helps[name], name
        assert "per server" not in helps[name], name


def test_scheduler_decides_where_servers_and_jobs_run():
    help_text = next(f.metadata["help"] for f in dataclasses.fields(PortalConfig) if f.name == "scheduler")
    assert "servers" in help_text and "jobs" in help_text
    assert not hasattr(PortalConfig(), "spawner_backend")  # the old name is read from files only (RENAMED)


@pytest.mark.parametrize("written", ["yaml", "environment"])
def test_an_old_setting_name_still_works_with_a_warning_naming_the_new_one(tmp_path, caplog, written):
    assert RENAMED == {"spawner_backend": "scheduler"}
    env = yaml_file(tmp_path, "spawner_backend: kubernetes\n") if written == "yaml" else {
        "DSPORTAL_SPAWNER_BACKEND": "kubernetes"}
    with caplog.at_level(logging.WARNING, logger="portal.config"), \
            pytest.warns(DeprecationWarning, match="spawner_backend .* is deprecated: it is now called scheduler"):
        cfg = load(env=env)
    assert cfg.scheduler == "kubernetes" and cfg.hub_api_address == "127.0.0.1"
    assert "set scheduler (DSPORTAL_SCHEDULER) instead" in caplog.text
    where = f"YAML file {env['DSPORTAL_CONFIG']}" if written == "yaml" else "environment DSPORTAL_SPAWNER_BACKEND"
    assert cfg.sources()["scheduler"] == where


def test_an_old_and_a_new_name_set_apart_is_an_error_naming_both(tmp_path):
    env = {**yaml_file(tmp_path, "scheduler: slurm\n"), "DSPORTAL_SPAWNER_BACKEND": "kubernetes"}
    with pytest.warns(DeprecationWarning), pytest.raises(ConfigError) as err:
        load(env=env)
    assert str(err.value) == (f"spawner_backend is 'kubernetes' (from environment DSPORTAL_SPAWNER_BACKEND) but "
                              f"scheduler is 'slurm' (from YAML file {env['DSPORTAL_CONFIG']}): spawner_backend is "
                              "the old name of scheduler; set only scheduler")
    with pytest.warns(DeprecationWarning):  # the same value under both names is only the warning
        assert load(env={"DSPORTAL_SCHEDULER": "kubernetes", "DSPORTAL_SPAWNER_BACKEND": "kubernetes"}).scheduler == \
            "kubernetes"
    with pytest.warns(DeprecationWarning), pytest.raises(ConfigError, match=r"scheduler is 'pbs'; allowed: slurm, "
                                                        r"kubernetes \(from environment DSPORTAL_SPAWNER_BACKEND\)"):
        load(env={"DSPORTAL_SPAWNER_BACKEND": "pbs"})


def test_module_lists_settings_and_refuses_bad_values():
    command = [sys.executable, "-m", "portal.config"]
    cwd = REPO
    listed = subprocess.run(command, capture_output=True, text=True, cwd=cwd, env={"DSPORTAL_HUB_PORT": "9100"})
    assert listed.returncode == 0
    assert "hub_port (int) = 9100    [environment DSPORTAL_HUB_PORT; default 8000]" in listed.stdout
    hub = listed.stdout[listed.stdout.index("# Hub settings (set in jupyterhub_config.py as c.<Class>.<name>):"):]
    assert "\nc.PortalLDAPAuthenticator.failed_login_limit_per_user_client (int) = 5\n    Failed logins" in hub
    assert "c.LDAPAuthenticator.server_address  <-  ldap_host" in listed.stdout
    refused = subprocess.run(command, capture_output=True, text=True, cwd=cwd, env={"DSPORTAL_LDAP_TLS": "tls"})
    assert refused.returncode == 2
    assert "ldap_tls is 'tls'; allowed: starttls, ldaps, none (from environment DSPORTAL_LDAP_TLS)" in refused.stderr


@pytest.mark.parametrize("template, namespace, user", [
    ("dsportal-u-{username}", "dsportal-u-alice", "alice"),
    ("dsportal-u-{username}", "dsportal-u-", None),
    ("dsportal-u-{username}", "kube-system", None),
    ("dsportal-u-{username}", "dsportal", None),
    ("{username}-work", "bob-work", "bob"),
    ("{username}-work", "-work", None),
    ("u-{username}-x", "u-a-b-x", "a-b"),
])
def test_whose_namespace_is_the_template_turned_round(template, namespace, user):
    cfg = PortalConfig(scheduler="kubernetes", k8s_user_namespace_template=template)
    assert cfg.namespace_user(namespace) == user
    if user:
        assert cfg.user_namespace(user) == namespace


@pytest.mark.parametrize("sender", ["portal", "Portal <portal@x.org>\nBcc: all@x.org", "", "<>"])
def test_mail_from_is_one_address_on_one_line(sender):
    with pytest.raises(ConfigError, match="mail_from is .*allowed: one address on one line"):
        PortalConfig(mail_from=sender)
    assert PortalConfig(mail_from="Ops <ops@hospital.example>").mail_from == "Ops <ops@hospital.example>"
