"""The e-mail at a job's end (portal.jobmail, Slurm's MailProg): the message, its recipient (the job's owner only),
a sweep's real end, and what it refuses."""

from __future__ import annotations

import smtplib

import pytest

from portal import jobmail
from portal.config import PortalConfig
from portal.directory import DirectoryError
from portal.jobmail import compose, slurm_arguments
from portal.scheduler.slurm.errors import SlurmRefused

FIRST_MESSAGE = jobmail.first_message  # before any stand-in

ENV = {"SLURM_JOB_ID": "42", "SLURM_JOB_USER": "alice", "SLURM_JOB_STATE": "COMPLETED",
       "SLURM_JOB_MAIL_TYPE": "Ended", "SLURM_JOB_RUN_TIME": "00:02:31", "SLURM_JOB_EXIT_CODE_MAX": "0"}
SENDER = PortalConfig().mail_from


@pytest.fixture(autouse=True)
def every_message_a_first(monkeypatch):
    """main's arrays' markers (first_message) belong to a box's slurm directory: here every message is a first."""
    monkeypatch.setattr(jobmail, "first_message", lambda cfg, array_id: True)


def test_an_arrays_second_message_within_the_window_is_not_sent_and_a_reused_id_is_later(tmp_path):
    import dataclasses

    cfg = dataclasses.replace(PortalConfig(), state_dir=tmp_path)
    cfg.slurm_conf_path.parent.mkdir(parents=True)
    real = FIRST_MESSAGE  # the module's own, past the autouse stand-in
    assert real(cfg, "42", now=1000.0) and not real(cfg, "42", now=1000.0 + jobmail.SENT_WINDOW_S)
    assert real(cfg, "43", now=1001.0)  # another array
    assert real(cfg, "42", now=1000.0 + jobmail.SENT_WINDOW_S + 1)  # Slurm gave the id again, after a reset
    marker = cfg.slurm_conf_path.parent / jobmail.SENT_DIR / f"{cfg.cluster_name}-42"
    assert marker.is_file() and oct(marker.stat().st_mode & 0o777) == "0o600"


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


# A sweep of 4 trials cancelled after its last task, the array's own record, completed early (its trial pruned):
# Slurm's SLURM_JOB_STATE is that task's, its exit codes all 0 (a pending task cancelled has none).
SWEEP_ENV = {**ENV, "SLURM_JOB_ID": "42", "SLURM_ARRAY_JOB_ID": "42", "SLURM_ARRAY_TASK_ID": "3",
             "SLURM_JOB_STATE": "COMPLETED", "SLURM_JOB_EXIT_CODE_MIN": "0", "SLURM_JOB_EXIT_CODE_MAX": "0"}
SWEEP_SUBJECT = "Slurm Array Summary Job_id=42_* (42) Name=sweep Ended, COMPLETED, ExitCode [0-0]"


@pytest.mark.parametrize("slurm_state, sacct, squeue, end", [
    ("COMPLETED", {0: "COMPLETED", 1: "CANCELLED", 2: "CANCELLED", 3: "COMPLETED"}, {}, "CANCELLED"),
    # sacct has not heard of the cancel yet; squeue has (or the other way round): an ended word from either counts
    ("COMPLETED", {0: "COMPLETED", 1: "RUNNING", 2: "PENDING", 3: "COMPLETED"},
     {0: "COMPLETED", 1: "CANCELLED", 2: "CANCELLED", 3: "COMPLETED"}, "CANCELLED"),
    ("COMPLETED", {0: "COMPLETED", 1: "CANCELLED"}, {0: "COMPLETED", 1: "COMPLETING"}, "CANCELLED"),
    ("COMPLETED", {0: "COMPLETED", 1: "COMPLETED", 2: "FAILED", 3: "COMPLETED"}, {}, "COMPLETED"),
    ("FAILED", {0: "FAILED", 1: "FAILED", 2: "TIMEOUT", 3: "FAILED"}, {}, "FAILED"),
    ("COMPLETED", {0: "FAILED", 1: "OUT_OF_MEMORY"}, {}, "COMPLETED"),  # Slurm's word counts as its task's
    ("CANCELLED", {}, {}, "CANCELLED"),  # Slurm answered nothing: its own word, the array's record's
    ("", {0: "COMPLETING"}, {}, "ENDED"),  # nothing said how it ended
])
def test_a_sweeps_end_is_its_tasks_not_slurms_word_for_its_last_one(slurm_state, sacct, squeue, end):
    assert jobmail.sweep_end(slurm_state, sacct, squeue) == end


def test_only_slurms_subject_for_a_whole_array_makes_it_a_sweeps_message():
    assert jobmail.array_summary(SWEEP_SUBJECT, SWEEP_ENV) == "42"
    # The array's own record before any task split off names no SLURM_ARRAY_JOB_ID: its id is the array's.
    assert jobmail.array_summary(SWEEP_SUBJECT, {"SLURM_JOB_ID": "42"}) == "42"
    assert jobmail.array_summary(SWEEP_SUBJECT, {"SLURM_JOB_ID": "43"}) is None  # another job's subject
    assert jobmail.array_summary("Slurm Array Task Job_id=42_3 (45) Name=x Ended", SWEEP_ENV) is None
    assert jobmail.array_summary("Slurm Job_id=42 Name=Slurm Array Summary Job_id=42_* (42) Ended",
                                 {"SLURM_JOB_ID": "42"}) is None  # a job's name is the user's: not read


def test_a_cancelled_sweeps_message_says_cancelled_and_its_best_so_far(monkeypatch, capsys):
    directory_of(monkeypatch, {"alice": "alice@dsportal.local"})
    sent, asked = [], []
    monkeypatch.setattr(jobmail, "array_tasks", lambda array_id, user, cfg: asked.append((array_id, user)) or [
        {0: "COMPLETED", 1: "CANCELLED", 2: "CANCELLED", 3: "COMPLETED"}])
    monkeypatch.setattr(jobmail, "job_figures", lambda job_id, user, cfg: (0.81234, "http://h/jobs/42"))
    monkeypatch.setattr(jobmail, "send", lambda message, cfg: sent.append(message))
    assert jobmail.main(["-s", SWEEP_SUBJECT, "alice"], SWEEP_ENV) == 0
    assert asked == [("42", "alice")]
    assert sent[0]["Subject"] == "Job 42 CANCELLED: best mean AUROC so far 0.812"
    body = sent[0].get_content()
    assert "ended: CANCELLED." in body and "Best mean AUROC so far: 0.812. It did not run to its end." in body
    assert "COMPLETED" not in body
    # The same sweep when every trial ran to its end: its best, as Slurm said.
    monkeypatch.setattr(jobmail, "array_tasks", lambda array_id, user, cfg: [{t: "COMPLETED" for t in range(4)}])
    assert jobmail.main(["-s", SWEEP_SUBJECT, "alice"], SWEEP_ENV) == 0
    assert sent[1]["Subject"] == "Job 42 COMPLETED: best mean AUROC 0.812"
    # A single job's state stays Slurm's own: no tasks asked.
    assert jobmail.main(["-s", "Slurm Job_id=42 Name=x Ended, COMPLETED, ExitCode 0", "alice"], ENV) == 0
    assert len(asked) == 1 and sent[2]["Subject"] == "Job 42 COMPLETED: best mean AUROC 0.812"


def test_a_sweep_whose_own_record_never_ran_reads_its_exit_codes_as_the_arrays(monkeypatch):
    directory_of(monkeypatch, {"alice": "alice@dsportal.local"})
    sent = []
    monkeypatch.setattr(jobmail, "array_tasks", lambda array_id, user, cfg: [{0: "FAILED", 1: "CANCELLED"}])
    monkeypatch.setattr(jobmail, "job_figures", lambda job_id, user, cfg: (None, None))
    monkeypatch.setattr(jobmail, "send", lambda message, cfg: sent.append(message))
    env = {"SLURM_JOB_ID": "42", "SLURM_JOB_USER": "alice", "SLURM_JOB_STATE": "CANCELLED",
           "SLURM_JOB_EXIT_CODE2": "0:0", "SLURM_JOB_EXIT_CODE_MIN": "0", "SLURM_JOB_EXIT_CODE_MAX": "2"}
    assert jobmail.main(["-s", "Slurm Array Summary Job_id=42_* (42) Name=s Failed, Mixed, ExitCode [0-2]",
                         "alice"], env) == 0
    assert sent[0]["Subject"] == "Job 42 CANCELLED: best mean AUROC none recorded"
    assert "Its exit code: 2." in sent[0].get_content()  # the array's _MAX, not the never-run record's own 0:0


def test_the_tasks_are_asked_of_slurm_for_the_owners_array_only(monkeypatch, capsys):
    ran = []

    def fake_run(self, *argv, **kwargs):
        ran.append(argv)
        if argv[0] == "squeue":
            raise SlurmRefused("Slurm refused `squeue`: Invalid job id specified", "Invalid job id")
        return "42_0|COMPLETED\n42_1|CANCELLED by 1001\n42_[2-3]|CANCELLED by 1001\n43_0|FAILED\n"
    monkeypatch.setattr("portal.scheduler.slurm.commands.SlurmCommands.run", fake_run)
    answers = jobmail.array_tasks("42", "alice", PortalConfig())
    assert answers == [{0: "COMPLETED", 1: "CANCELLED", 2: "CANCELLED", 3: "CANCELLED"}]
    assert [argv[0] for argv in ran] == ["sacct", "squeue"] and all(("-u", "alice") == argv[
        argv.index("-u"):argv.index("-u") + 2] for argv in ran)
    assert "job 42: its tasks' states: Slurm refused `squeue`" in capsys.readouterr().err


def test_nothing_but_slurms_own_words_reaches_the_headers():
    message = compose({**ENV, "SLURM_JOB_STATE": "COMPLETED\nBcc: bob@dsportal.local"}, "alice", None, None, SENDER)
    assert message["Subject"] == "Job 42 ENDED: best mean AUROC none recorded" and "Bcc" not in message.as_string()


@pytest.mark.parametrize("argv", [[], ["-s", "subject"], ["alice"], ["-x", "s", "alice"], ["-s", "s", "a", "b"]])
def test_only_slurms_own_arguments_are_taken(argv):
    with pytest.raises(ValueError, match="-s SUBJECT ADDRESS"):
        slurm_arguments(argv)
    assert slurm_arguments(["-s", "Slurm Job_id=42 Ended", "alice"]) == ("Slurm Job_id=42 Ended", "alice")
    assert slurm_arguments(["-s", "s", "-t"]) == ("s", "-t")  # a --mail-user like an option: asked, never used


def directory_of(monkeypatch, addresses):
    """The directory's `mail` for each user in `addresses` (None for the rest), and who it was asked about."""
    asked = []

    def directory_mail(user, cfg):
        asked.append(user)
        return addresses.get(user)
    monkeypatch.setattr("portal.directory.directory_mail", directory_mail)
    return asked


def test_the_address_is_the_directorys_for_the_jobs_owner_and_no_other(monkeypatch):
    asked = directory_of(monkeypatch, {"alice": "alice@dsportal.local", "bob": "bob@dsportal.local"})
    assert jobmail.owner_address("bob", PortalConfig()) == "bob@dsportal.local"
    assert asked == ["bob"]  # the owner as Slurm names them: never the address the job asked for
    with pytest.raises(jobmail.NoAddress, match="the directory has no `mail` for carol"):
        jobmail.owner_address("carol", PortalConfig())  # none in the directory: no message, not carol@<the MTA's>

    def down(user, cfg):
        raise DirectoryError("LDAP at ldap://x: timed out")
    monkeypatch.setattr("portal.directory.directory_mail", down)
    with pytest.raises(jobmail.NoAddress, match="timed out"):
        jobmail.owner_address("bob", PortalConfig())


@pytest.mark.parametrize("asked, owners", [
    ("bob", True),  # Slurm's own: the job named no --mail-user
    ("bob@dsportal.local", True),
    ("Bob@DSPortal.LOCAL", True),  # the owner's address in another case
    ("alice@dsportal.local", False),
    ("ALICE@dsportal.local", False),
    ("alice", False),
    ("alice@dsportal.local,bob@dsportal.local", False),
    ("bob@dsportal.local, alice@dsportal.local", False),
    ("bob@dsportal.local alice@dsportal.local", False),
    ("Bob <alice@dsportal.local>", False),
    ("Bob <bob@dsportal.local>", False),  # a display name: not the address itself
    ("bob@dsportal.local\nBcc: alice@dsportal.local", False),
    ("bob@dsportal.local\r\nTo: alice@dsportal.local", False),
    ("bob@dsportal.local.evil.example", False),
    ("", False),
    ("-t", False),
])
def test_only_the_owners_own_name_or_address_counts_as_asked_by_the_owner(asked, owners):
    assert jobmail.asked_for_owner(asked, "bob", "bob@dsportal.local") is owners


BOBS = {**ENV, "SLURM_JOB_ID": "16", "SLURM_JOB_USER": "bob"}


@pytest.mark.parametrize("asked", ["alice@dsportal.local", "Alice@DSPortal.local", "alice",
                                   "alice@dsportal.local,bob@dsportal.local", "Alice <alice@dsportal.local>",
                                   "bob@dsportal.local\nBcc: alice@dsportal.local"])
def test_a_job_asking_for_another_address_mails_its_owner_only_and_logs_the_refusal(monkeypatch, capsys, asked):
    directory_of(monkeypatch, {"alice": "alice@dsportal.local", "bob": "bob@dsportal.local"})
    sent = []
    monkeypatch.setattr(jobmail, "job_figures", lambda job_id, user, cfg: (None, None))
    monkeypatch.setattr(jobmail, "send", lambda message, cfg: sent.append(message))
    assert jobmail.main(["-s", "Slurm Job_id=16 Name=x Ended, COMPLETED, ExitCode 0", asked], BOBS) == 0
    (message,) = sent
    assert message["To"] == "bob@dsportal.local" and "alice" not in message.as_string()
    err = capsys.readouterr().err
    refusal = [line for line in err.splitlines() if "refused" in line]
    assert refusal == [f"portal.jobmail: job 16 of bob: refused --mail-user {asked!r}: not bob's address; the "
                       "message goes to bob@dsportal.local only"], err
    assert len(err.splitlines()) == 2  # the refusal and the sending: a line break in the asked text stays escaped


def test_the_owners_own_job_is_mailed_without_a_refusal_and_one_without_an_address_is_not_mailed(
        monkeypatch, capsys):
    directory_of(monkeypatch, {"bob": "bob@dsportal.local"})
    sent = []
    monkeypatch.setattr(jobmail, "job_figures", lambda job_id, user, cfg: (None, None))
    monkeypatch.setattr(jobmail, "send", lambda message, cfg: sent.append(message))
    assert jobmail.main(["-s", "Slurm Job_id=16 Ended", "bob"], BOBS) == 0
    assert sent[0]["To"] == "bob@dsportal.local" and "refused" not in capsys.readouterr().err
    directory_of(monkeypatch, {})
    assert jobmail.main(["-s", "Slurm Job_id=16 Ended", "bob"], BOBS) == jobmail.EXIT_FAILURE
    assert len(sent) == 1 and "not mailed: the directory has no `mail` for bob" in capsys.readouterr().err


def test_main_hands_the_message_to_the_mta_and_says_so(monkeypatch, capsys):
    sent = []
    monkeypatch.setattr(jobmail, "owner_address", lambda user, cfg: "alice@dsportal.local")
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
