"""The e-mail at a job's end (portal.jobmail, Slurm's MailProg): the message, its recipient, and what it refuses."""

from __future__ import annotations

import smtplib

import pytest

from portal import jobmail
from portal.config import PortalConfig
from portal.directory import DirectoryError
from portal.jobmail import compose, recipient_of

ENV = {"SLURM_JOB_ID": "42", "SLURM_JOB_USER": "alice", "SLURM_JOB_STATE": "COMPLETED",
       "SLURM_JOB_MAIL_TYPE": "Ended", "SLURM_JOB_RUN_TIME": "00:02:31", "SLURM_JOB_EXIT_CODE_MAX": "0"}
SENDER = PortalConfig().mail_from


def test_the_message_names_the_job_its_state_its_best_auroc_and_its_page():
    message = compose(ENV, "alice@dsportal.local", 0.81234, "http://portal.example/services/portal/jobs/42", SENDER)
    assert message["Subject"] == "Job 42 COMPLETED: best mean AUROC 0.812"
    assert message["To"] == "alice@dsportal.local" and message["From"] == SENDER and message["Message-ID"]
    body = message.get_content()
    assert "ended: COMPLETED" in body and "ran for 00:02:31" in body and "exit code" not in body
    assert "http://portal.example/services/portal/jobs/42" in body


def test_a_failed_job_without_metrics_or_page_says_so():
    message = compose({**ENV, "SLURM_JOB_STATE": "FAILED", "SLURM_JOB_EXIT_CODE_MAX": "3"}, "alice", None, None,
                      SENDER)
    assert message["Subject"] == "Job 42 FAILED: best mean AUROC none recorded"
    assert "Its exit code: 3." in message.get_content() and "no page" in message.get_content()


@pytest.mark.parametrize("variables, state, line", [
    ({"SLURM_JOB_EXIT_CODE2": "2:0", "SLURM_JOB_EXIT_CODE_MAX": "2"}, "FAILED", "Its exit code: 2."),
    # the batch shell killed by a signal: slurmctld's _MAX is "0", its EXIT_CODE2 names the signal (Slurm 22.05)
    ({"SLURM_JOB_EXIT_CODE2": "0:9", "SLURM_JOB_EXIT_CODE_MAX": "0"}, "FAILED",
     "Its exit code: none, killed by signal 9."),
    ({"SLURM_JOB_EXIT_CODE_MAX": "0"}, "FAILED", "Its exit code: not known (see the job's page)."),
    ({}, "TIMEOUT", "Its exit code: not known (see the job's page)."),
    ({"SLURM_JOB_EXIT_CODE2": "0:0", "SLURM_JOB_EXIT_CODE_MAX": "0"}, "COMPLETED", ""),
    ({"SLURM_JOB_EXIT_CODE2": "0:15"}, "CANCELLED", "Its exit code: none, killed by signal 15."),
    ({"SLURM_JOB_EXIT_CODE2": "9999:0", "SLURM_JOB_EXIT_CODE_MAX": "1;rm"}, "FAILED",
     "Its exit code: not known (see the job's page)."),  # what is not Slurm's shape is not read
    # a job array (a sweep): the tasks' range, or the signal that ended one
    ({"SLURM_ARRAY_JOB_ID": "42", "SLURM_JOB_EXIT_CODE_MIN": "0", "SLURM_JOB_EXIT_CODE_MAX": "3"}, "FAILED",
     "Its exit code: 3."),
    ({"SLURM_ARRAY_JOB_ID": "42", "SLURM_JOB_EXIT_CODE_MIN": "1", "SLURM_JOB_EXIT_CODE_MAX": "3"}, "FAILED",
     "Its exit codes: 1 to 3."),
    ({"SLURM_ARRAY_JOB_ID": "42", "SLURM_JOB_TERM_SIGNAL_MAX": "9"}, "FAILED",
     "Its exit code: none, killed by signal 9."),
    ({}, "", ""),
])
def test_the_exit_code_line_reads_what_slurm_passes_for_each_kind_of_end(variables, state, line):
    assert jobmail.exit_code_line(variables, state) == line


def test_a_sweeps_message_names_the_array_the_portal_knows_it_by():
    env = {**ENV, "SLURM_JOB_ID": "47", "SLURM_ARRAY_JOB_ID": "42", "SLURM_ARRAY_TASK_ID": "5"}
    assert jobmail.job_of(env) == "42" and jobmail.job_of(ENV) == "42"
    assert jobmail.job_of({**env, "SLURM_ARRAY_JOB_ID": "4\n2"}) == "47"  # not Slurm's: the job's own id
    assert compose(env, "alice", 0.9, None, SENDER)["Subject"] == "Job 42 COMPLETED: best mean AUROC 0.900"


def test_nothing_but_slurms_own_words_reaches_the_headers():
    message = compose({**ENV, "SLURM_JOB_STATE": "COMPLETED\nBcc: bob@dsportal.local"}, "alice", None, None, SENDER)
    assert message["Subject"] == "Job 42 ENDED: best mean AUROC none recorded" and "Bcc" not in message.as_string()


@pytest.mark.parametrize("argv", [[], ["-s", "subject"], ["alice"], ["-s", "x", "-t"], ["-x", "s", "alice"]])
def test_only_slurms_own_arguments_are_taken(argv):
    with pytest.raises(ValueError, match="-s SUBJECT ADDRESS"):
        recipient_of(argv)
    assert recipient_of(["-s", "Slurm Job_id=42 Ended", "alice"]) == "alice"


def test_the_address_is_the_directorys_for_the_jobs_own_user(monkeypatch):
    cfg = PortalConfig()
    monkeypatch.setattr("portal.directory.directory_mail", lambda user, cfg: f"{user}@dsportal.local")
    assert jobmail.address_for("alice", "alice", cfg) == "alice@dsportal.local"
    assert jobmail.address_for("ops@example.org", "alice", cfg) == "ops@example.org"  # given to sbatch: as given
    with pytest.raises(ValueError, match="is not one address"):
        jobmail.address_for("a@b, bob@dsportal.local", "alice", cfg)
    monkeypatch.setattr("portal.directory.directory_mail", lambda user, cfg: None)
    assert jobmail.address_for("alice", "alice", cfg) == "alice"  # no `mail` in the directory: the MTA's local user

    def down(user, cfg):
        raise DirectoryError("LDAP at ldap://x: timed out")
    monkeypatch.setattr("portal.directory.directory_mail", down)
    assert jobmail.address_for("alice", "alice", cfg) == "alice"


def test_main_hands_the_message_to_the_mta_and_says_so(monkeypatch, capsys):
    sent = []
    monkeypatch.setattr(jobmail, "address_for", lambda recipient, user, cfg: "alice@dsportal.local")
    monkeypatch.setattr(jobmail, "job_figures", lambda job_id, user, cfg: (0.75, "http://h/jobs/42"))
    monkeypatch.setattr(jobmail, "send", lambda message, cfg: sent.append(message))
    assert jobmail.main(["-s", "Slurm Job_id=42 Ended", "alice"], ENV) == 0
    assert sent[0]["To"] == "alice@dsportal.local" and "0.750" in sent[0]["Subject"]
    assert "sent to alice@dsportal.local" in capsys.readouterr().err

    def refused(message, cfg):
        raise smtplib.SMTPRecipientsRefused({"alice@dsportal.local": (550, b"Unrouteable address")})
    monkeypatch.setattr(jobmail, "send", refused)
    assert jobmail.main(["-s", "s", "alice"], ENV) == jobmail.EXIT_FAILURE
    assert "did not take the message" in capsys.readouterr().err
    assert jobmail.main(["alice"], ENV) == jobmail.EXIT_USAGE
