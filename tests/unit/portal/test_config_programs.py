"""The site's own programs' settings (portal.config_programs): each bad value refused naming its setting, and the
Kubernetes claim only with the directory it is mounted at."""

from __future__ import annotations

import pytest

from portal.config import PortalConfig
from portal.config_values import ConfigError


@pytest.mark.parametrize(("given", "said"), [
    ({"site_programs": ("our program",)}, "site_programs has 'our program'; allowed: Python module names"),
    ({"site_launchers": ("ours..launcher",)}, "site_launchers has 'ours..launcher'; allowed: Python module names"),
    ({"site_programs": ("ourprogram.program; rm",)}, "site_programs has"),
    ({"site_python_path": "site/programs"}, "site_python_path is 'site/programs'; allowed: an absolute directory"),
    ({"site_python_path": "/opt/a:/opt/b"}, "site_python_path is '/opt/a:/opt/b'; allowed: an absolute directory "
                                            "without ':'"),
    ({"k8s_site_programs_claim": "site-programs"}, "k8s_site_programs_claim is set and site_python_path is not"),
    ({"k8s_site_programs_claim": "Site_Programs", "site_python_path": "/opt/site"},
     "k8s_site_programs_claim is 'Site_Programs'; allowed: lower-case letters, digits and '-'"),
])
def test_a_bad_site_registration_is_refused_naming_its_setting(given, said):
    with pytest.raises(ConfigError) as err:
        PortalConfig(**given)
    assert said in str(err.value)


def test_none_by_default_and_a_whole_site_registration_is_taken():
    assert (PortalConfig().site_programs, PortalConfig().site_launchers, PortalConfig().site_python_path) == \
        ((), (), "")
    cfg = PortalConfig(site_programs=("ourprogram.program",), site_launchers=("ourprogram.launcher",),
                       site_python_path="/opt/site-programs", k8s_site_programs_claim="site-programs")
    assert cfg.site_programs == ("ourprogram.program",) and cfg.k8s_site_programs_claim == "site-programs"
