"""The scheduler layer: the one way the spawners, the training jobs (portal.jobs), the dashboard and the accounts
sync reach a scheduler. The contract every scheduler implements is `protocol.py` (Scheduler, KeepsRecords,
HostsServers); the configured one comes from `registry.py` (`scheduler_for`); each scheduler is a package of its own
below (`slurm/`, `kubernetes/`; `local.py`), which owns its section of the settings where it has one
(`kubernetes/settings.py`). This file imports nothing: the settings take in a scheduler's section without the
scheduler layer."""
