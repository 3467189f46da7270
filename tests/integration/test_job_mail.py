"""E-mail at a job's end, for real: Slurm's --mail-type, slurm.conf's MailProg (portal.jobmail), the box's exim4
delivering to alice's mailbox in box_mail_dir (the test box's own, not /var/mail), the address from the directory.
One job asks for it and gets it; one that says no, and one whose user said no, get none. The jobs fail at once (their
data directory is empty), which is also Slurm's FAIL mail; a completed job's e-mail is checked by the dashboard's
browser test.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from portal import jobs
from portal.config import load
from portal.runas import RUNUSER
from tests.conftest import (
    JOB_END_GRACE_S,
    Mailbox,
    as_user,
    logged_since,
    scratch_dir,
    slurm,
    user_settings_cleared,
    wait_for,
)

pytestmark = pytest.mark.integration
# Fails at its start: no TFRecords in its data directory (the job's own error says so).
FAILING = {"template": "chexnet", "epochs": 1, "batch_size": 8, "image_size": 64, "cpus_per_task": 1, "memory_gb": 2,
           "gpus_per_node": 0, "time_limit": "00:05:00"}
MAIL_WAIT_S = 60  # MailProg runs when slurmctld records the end; exim delivers at once


@pytest.fixture
def empty_data(cluster):
    """A directory of alice's with no data in it (in the tests' scratch of her home), and her settings of the test
    box as a newcomer's (none)."""
    path = scratch_dir("alice") / "mail-test-empty-data"
    as_user("alice", "mkdir", "-p", "--", str(path))
    user_settings_cleared("alice")
    yield str(path)
    user_settings_cleared("alice")
    as_user("alice", "rm", "-rf", "--", str(path))


def test_a_job_that_asks_gets_its_email_and_one_that_says_no_gets_none(cluster, empty_data):
    mailbox = Mailbox("alice")
    log = load().slurm_conf_path.parent / "jobmail.log"
    log_start = log.stat().st_size if log.exists() else 0
    failing = {**FAILING, "data_dir": empty_data}  # the default program's (each one's script asks: test_sbatch.py)
    quiet = jobs.submit({**failing, "mail": False}, scheduler="slurm", user="alice")
    asked = jobs.submit(failing, scheduler="slurm", user="alice")  # alice's default: on
    assert (quiet.spec.mail, asked.spec.mail) == (False, True)
    for job in (quiet, asked):
        job.wait(timeout=JOB_END_GRACE_S + 300)
        assert job.state == "FAILED", (job.id, job.state, job.logs(tail=20))

    (message,) = wait_for(lambda: mailbox.about(asked.id), MAIL_WAIT_S, interval=2,
                          what=f"the e-mail about job {asked.id} in {mailbox.path}")
    assert message["Subject"] == f"Job {asked.id} FAILED: best mean AUROC none recorded"
    assert message["To"] == "alice@dsportal.local"  # the directory's `mail`, not Slurm's bare user name
    assert message["From"] == load().mail_from
    users_own = Path("/var/mail/alice")  # where her own box (`make up`) delivers: the tests' mail never goes there
    assert not users_own.exists() or message["Message-ID"].encode() not in users_own.read_bytes()
    body = message.get_content()
    assert f"{load().hub_url}/services/portal/jobs/{asked.id}" in body
    # The exit code as Slurm recorded it ("exit:signal"): the mail says the same.
    code, signal = (int(n) for n in slurm("sacct", "-X", "-n", "-P", "-o", "ExitCode", "-j", asked.id).split(":"))
    said_code = f"Its exit code: {code}." if code else f"Its exit code: none, killed by signal {signal}." if signal \
        else "Its exit code: not known (see the job's page)."
    assert said_code in body, (code, signal, body)
    # The job that said no: MailProg was never run for it (its log names every job it was run for). MailProg logs
    # "sent" after the MTA's answer to QUIT, which may come after exim has delivered: so wait for the line.
    said = wait_for(lambda: logged_since(log, log_start, f"job {asked.id} of alice: 'Job {asked.id} FAILED"),
                    MAIL_WAIT_S, interval=1, what=f"MailProg's line about job {asked.id} in {log}")
    assert f"job {quiet.id} of" not in said, said
    assert mailbox.about(quiet.id) == []


def test_a_job_naming_another_users_address_mails_its_owner_only(cluster):
    """bob, from a terminal, asks Slurm to mail alice at his job's end: the portal's MailProg mails bob (the job's
    owner, at the directory's address) and nobody else, and says in its log that it refused."""
    alice, bob = Mailbox("alice"), Mailbox("bob")
    log = load().slurm_conf_path.parent / "jobmail.log"
    log_start = log.stat().st_size if log.exists() else 0
    typed = subprocess.run([RUNUSER, "-u", "bob", "--", "env", f"SLURM_CONF={cluster.slurm_conf_path}", "sbatch",
                            "--parsable", "-o", "/dev/null", "--mail-type=END", "--mail-user=alice@dsportal.local",
                            "--wrap=true"], capture_output=True, text=True, timeout=60, cwd="/tmp")
    assert typed.returncode == 0, typed.stderr
    job_id = typed.stdout.strip()
    (message,) = wait_for(lambda: bob.about(job_id), JOB_END_GRACE_S + MAIL_WAIT_S, interval=2,
                          what=f"the e-mail about bob's job {job_id} in {bob.path}")
    assert message["To"] == "bob@dsportal.local" and message["Subject"].startswith(f"Job {job_id} COMPLETED"), \
        (message["To"], message["Subject"])
    assert "It was not submitted through the portal" in message.get_content()
    said = logged_since(log, log_start, "")
    assert f"job {job_id} of bob: refused --mail-user 'alice@dsportal.local'" in said, said
    assert not [m for m in alice.messages() if job_id in str(m["Subject"])]  # hers: nothing about his job
