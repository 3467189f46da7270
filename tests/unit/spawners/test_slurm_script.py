"""The server's batch script: batchspawner's Slurm script with the job's output in the server log directory and
`--get-user-env` as Slurm 26.05 takes it, and a site's own script taken whole."""

from batchspawner import SlurmSpawner
from batchspawner.batchspawner import format_template

from portal.config import PortalConfig
from spawners.slurm import SERVER_JOB_SCRIPT, PortalSlurmSpawner
from spawners.slurm_script import server_log_dir


def spawner(home: str, **traits) -> PortalSlurmSpawner:
    return PortalSlurmSpawner(portal=PortalConfig(), req_username="alice", req_homedir=home, req_keepvars="",
                              **traits)


def script_of(spawner_: PortalSlurmSpawner) -> str:
    return format_template(spawner_.batch_script, **spawner_.get_req_subvars(), cmd="server")


GET_USER_ENV = ("#SBATCH --get-user-env=L", "#SBATCH --get-user-env")  # 26.05 refuses a mode


def test_the_template_is_batchspawners_but_for_the_output_line_and_the_user_env():
    """Copied from batchspawner 1.3.0: a batchspawner upgrade that changes its script fails here, to be copied again."""
    changed = [(a, b) for a, b in zip(SlurmSpawner.batch_script.default_value.splitlines(),
                                      SERVER_JOB_SCRIPT.splitlines(), strict=True) if a != b]
    assert changed == [("#SBATCH --output={{homedir}}/jupyterhub_slurmspawner_%j.log",
                        "#SBATCH --output={{server_log_dir}}/jupyterhub_slurmspawner_%j.log"), GET_USER_ENV]


def test_the_server_jobs_output_goes_to_the_server_log_dir_and_the_rest_of_the_script_is_batchspawners():
    alice = spawner("/home/alice")
    script = script_of(alice)
    stock = format_template(SlurmSpawner.batch_script.default_value, **alice.get_req_subvars(), cmd="server")
    changed = [(a, b) for a, b in zip(stock.splitlines(), script.splitlines(), strict=True) if a != b]
    assert changed == [("#SBATCH --output=/home/alice/jupyterhub_slurmspawner_%j.log",
                        f"#SBATCH --output={server_log_dir('/home/alice', 'dsportal')}/jupyterhub_slurmspawner_%j.log"),
                       GET_USER_ENV]
    assert "#SBATCH --chdir=/home/alice" in script  # the server still starts in the home
    assert "#SBATCH --no-requeue" in script and "\nsrun server\n" in script


def test_a_sites_own_script_is_taken_whole_and_can_name_the_directory():
    site = spawner("/home/alice", req_server_log_dir="/scratch/alice/logs",
                   batch_script="#!/bin/bash\n#SBATCH -o {{server_log_dir}}/server-%j.out\n{{cmd}}\n")
    assert script_of(site) == "#!/bin/bash\n#SBATCH -o /scratch/alice/logs/server-%j.out\nserver"


def test_a_site_chooses_the_directory():
    assert spawner("/home/alice/", req_server_log_dir="/scratch/alice/logs").get_req_subvars()["server_log_dir"] \
        == "/scratch/alice/logs"
    # Each cluster's own: Slurm's job ids are the cluster's, and homes may be shared with another cluster.
    assert spawner("/home/alice/").get_req_subvars()["server_log_dir"] == \
        "/home/alice/.cache/dsportal/servers/dsportal" == server_log_dir("/home/alice", "dsportal")
