"""The Slurm scheduler's section of the settings (portal/scheduler/slurm/settings.py): its own, checked by its
`check_section` whenever a PortalConfig is made."""

from __future__ import annotations

import pytest

from portal.config import ConfigError, PortalConfig, load
from portal.scheduler.slurm.settings import SlurmSettings


@pytest.mark.parametrize("name", ["slurmctld_port", "slurmd_port", "slurmdbd_port", "accounting_db_port"])
def test_the_section_refuses_a_port_out_of_range_naming_its_setting(name):
    with pytest.raises(ConfigError) as err:
        load(env={f"DSPORTAL_{name.upper()}": "70000"})
    assert f"{name} is 70000; allowed: 1-65535" in str(err.value)


def test_the_section_is_the_schedulers_own_and_part_of_every_config():
    assert issubclass(PortalConfig, SlurmSettings) and "check_section" in vars(SlurmSettings)
    assert PortalConfig(slurm_conf="/etc/slurm/slurm.conf").slurmctld_port == 6817
