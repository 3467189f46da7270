"""One value per setting: the hub's traits that are portal settings take the setting's value, a different value in
the hub's configuration stops the hub naming both, and `python -m portal.config` lists the hub's own settings."""

import logging
import ssl

import pytest
from ldapauthenticator.ldapauthenticator import TlsStrategy
from traitlets import Type
from traitlets.config import Config, Configurable
from traitlets.config.loader import DeferredConfigString

from portal.auth import PortalLDAPAuthenticator
from portal.config import ConfigError, PortalConfig
from portal.config_cli import hub_classes, hub_settings, hub_ties
from portal.traits import class_conflicts, ties_of

SITE = PortalConfig(ldap_host="ldap.example.org", ldap_tls="ldaps", ldaps_port=636, ldap_ca_file="/etc/ca.pem",
                    ldap_search_password="s3cret", allowed_groups=("team",), ldap_timeout=7, start_timeout=400)


def config(**sections: dict) -> Config:
    return Config({section: Config(values) for section, values in sections.items()})


def test_the_authenticator_reads_the_directory_from_the_settings():
    auth = PortalLDAPAuthenticator(portal=SITE)
    assert (auth.server_address, auth.server_port, auth.tls_strategy) == ("ldap.example.org", 636,
                                                                          TlsStrategy.on_connect)
    assert auth.tls_kwargs == {"ca_certs_file": "/etc/ca.pem", "validate": ssl.CERT_REQUIRED}
    assert auth.allowed_groups == ["cn=team,ou=groups,dc=dsportal,dc=local"]
    assert auth.lookup_dn_search_password == "s3cret"
    assert (auth.ldap_connect_timeout, auth.ldap_receive_timeout) == (7.0, 7)
    assert {"server_address", "server_port", "tls_strategy", "tls_kwargs", "bind_dn_template", "allowed_groups",
            "lookup_dn", "user_search_base", "user_attribute", "lookup_dn_search_user", "lookup_dn_search_password",
            "ldap_connect_timeout", "ldap_receive_timeout"} <= set(ties_of(PortalLDAPAuthenticator))


def test_another_value_in_the_hub_config_stops_the_hub_naming_the_trait_and_the_setting(caplog):
    site = config(LDAPAuthenticator={"server_address": "ldap.other.org", "lookup_dn_search_password": "hunter2"})
    with caplog.at_level(logging.ERROR, logger="hub-test"), pytest.raises(ConfigError) as err:
        PortalLDAPAuthenticator(portal=SITE, config=site, log=logging.getLogger("hub-test"))
    message = str(err.value)
    assert ("c.LDAPAuthenticator.server_address is 'ldap.other.org' in the hub's configuration, but the portal's "
            "setting ldap_host gives 'ldap.example.org'") in message
    assert "Set ldap_host (DSPORTAL_LDAP_HOST or in the DSPORTAL_CONFIG file) and remove " \
           "c.LDAPAuthenticator.server_address" in message
    assert "c.LDAPAuthenticator.lookup_dn_search_password is (hidden)" in message
    assert "hunter2" not in message and "s3cret" not in message and "hunter2" not in caplog.text
    assert caplog.text.count("in the hub's configuration") == 2  # one error line per trait, in the hub's log


def test_the_settings_own_values_are_accepted_in_every_spelling():
    same = config(
        LDAPAuthenticator={"server_address": "ldap.example.org", "tls_strategy": "on_connect", "use_ssl": True,
                           "allowed_groups": ("cn=team,ou=groups,dc=dsportal,dc=local",),
                           "bind_dn_template": "uid={username},ou=people,dc=dsportal,dc=local",
                           "server_port": DeferredConfigString("636")},  # as the command line gives it
        PortalLDAPAuthenticator={"ldap_receive_timeout": 7, "failed_login_delay": 3.0})  # a hub-only trait: free
    auth = PortalLDAPAuthenticator(portal=SITE, config=same)
    assert auth.failed_login_delay == 3.0 and auth.server_port == 636


def test_a_partial_or_more_specific_value_is_a_different_value():
    appended = Config()
    appended.LDAPAuthenticator.allowed_groups.append("cn=others,dc=example,dc=org")
    assert class_conflicts(appended, PortalLDAPAuthenticator, SITE)[0].startswith(
        "c.LDAPAuthenticator.allowed_groups is ['cn=team,ou=groups,dc=dsportal,dc=local', "
        "'cn=others,dc=example,dc=org']")
    specific = config(LDAPAuthenticator={"server_port": 636}, PortalLDAPAuthenticator={"server_port": 389})
    (problem,) = class_conflicts(specific, PortalLDAPAuthenticator, SITE)
    assert problem.startswith("c.PortalLDAPAuthenticator.server_port is 389") and \
        "settings ldap_port, ldaps_port, ldap_tls give 636" in problem and \
        "Set ldap_port, ldaps_port or ldap_tls (DSPORTAL_<NAME> or in the DSPORTAL_CONFIG file)" in problem


def test_code_may_still_set_a_trait_apart():
    assert PortalLDAPAuthenticator(portal=SITE, ldap_receive_timeout=2).ldap_receive_timeout == 2


class Hub(Configurable):
    """The part of the hub the authenticator looks at: its spawner class."""

    spawner_class = Type()


def test_the_hubs_spawner_class_is_checked_when_the_hub_starts():
    from spawners.kubernetes import PortalKubeSpawner
    from spawners.slurm import PortalSlurmSpawner

    site = config(Spawner={"start_timeout": 600}, KubeSpawner={"image": "registry.example.org/other:1"})
    hub = Hub(config=site, spawner_class=PortalKubeSpawner)
    with pytest.raises(ConfigError) as err:
        PortalLDAPAuthenticator(portal=SITE, parent=hub)
    assert "c.Spawner.start_timeout is 600" in str(err.value) and "setting start_timeout gives 400" in str(err.value)
    assert "c.KubeSpawner.image is 'registry.example.org/other:1'" in str(err.value) and "k8s_image" in str(err.value)
    assert class_conflicts(config(Spawner={"start_timeout": 400}), PortalSlurmSpawner, SITE) == []
    PortalLDAPAuthenticator(portal=SITE, parent=Hub(config=config(Spawner={"http_timeout": 120}),
                                                     spawner_class=PortalSlurmSpawner))


def test_the_hub_listing_has_only_our_own_traits_and_not_the_settings():
    classes = hub_classes()
    settings = {row["name"]: row for row in hub_settings(classes)}
    assert settings["c.PortalLDAPAuthenticator.failed_login_limit_per_user_client"]["default"] == "5"
    assert settings["c.SlurmStateSpawner.startup_check_timeout"]["type"] == "float"
    assert settings["c.PortalLDAPAuthenticator.trusted_proxies"]["default"] == "computed (see its help)"
    assert all(row["help"] for row in settings.values())
    assert not any(name.endswith((".server_address", ".start_timeout", ".http_timeout", ".ldap_connect_timeout"))
                   for name in settings)  # neither settings nor what our classes inherit
    ties = {row["name"]: row["settings"] for row in hub_ties(classes)}
    assert ties["c.LDAPAuthenticator.server_address"] == "ldap_host"
    assert ties["c.KubeSpawner.image"] == "k8s_image" and ties["c.Spawner.start_timeout"] == "start_timeout"
