"""The scheduler contract (portal.scheduler.protocol.Scheduler) for what a job's run leaves to read, one suite over
every scheduler (contract_helpers.DRIVERS: the local runner, the toy, Slurm per release, Kubernetes): its log (all of
it, its last lines, a sweep task's own), its metrics and per-epoch rows, its model card, its history, its line in the
cluster's queue while the cluster holds it (`queued`, `waiting`), the submit form's start note, and that another
user's read of it is refused as not found. Each test feeds the driver what a real run writes (`Run`: its lines,
its per-epoch record as programkit.tblog writes it, its card), which the driver puts where its scheduler keeps it (the
job's directory, or its pod's log behind the API server), and reads it back through the scheduler's own methods,
as the dashboard and portal.jobs do. What the home-directory readers do with hostile files (a FIFO, a huge record,
each wrong field of a card) is test_home.py's and test_home_epochs.py's; a job's life is test_contract_jobs.py's."""

from __future__ import annotations

import dataclasses

import pytest

from portal import errors
from portal.errors import JobNotFound
from portal.metrics import RunMetrics
from portal.records.spec import JobSpecError
from portal.records.sweep import parse_sweep
from portal.scheduler.home import ModelCardError
from programkit.tblog import EpochScalars
from tests.cards import a_card
from tests.unit.helpers import parse_spec
from tests.unit.portal.scheduler.contract_driver import LOST_AT, NODE, NODE_GPUS, Run
from tests.unit.portal.scheduler.contract_helpers import DRIVERS, Driver, driver_for

SPEC = parse_spec(nodes=1, gpus_per_node=0, epochs=3)
WHOLE_NODE = parse_spec(nodes=1, gpus_per_node=NODE_GPUS, epochs=3)  # every GPU of NODE


def epoch(number: int, auroc: float, rate: float) -> EpochScalars:
    """An epoch's line of the per-epoch record as chexnet.train writes it."""
    return EpochScalars(epoch=number, logdir="/home/alice/jobs/dsportal/42/tensorboard", images_per_sec=rate,
                        scalars={"loss/train": 0.4, "loss/val": 0.5, "auroc/mean": auroc, "auroc/Atelectasis":
                                 auroc + 0.03}, checkpoint=f"ckpt-{number}", seconds=60.0, program="chexnet")


# A run resumed after epoch 2's checkpoint was lost: epoch 2 is recorded twice, and its second line is the one its
# checkpoint holds (the first line's AUROC would be the best of the run, were it counted).
FIRST_TWO, RETRAINED_TWO = epoch(2, 0.80, 120.0), epoch(2, 0.70, 118.0)
EPOCHS = (epoch(1, 0.61, 100.0), FIRST_TWO, RETRAINED_TWO, epoch(3, 0.74, 110.0))
SAID = ("chexnet.train: 3 epochs of densenet121 on /data/chestxray14", "chexnet.train: epoch 1/3 started")
RUNNING = Run(said=SAID, epochs=EPOCHS)
CARD = {**a_card(), "environment": {**a_card()["environment"], "image_digest": None}}  # the run could not tell


@pytest.fixture(params=DRIVERS)
def driver(request, tmp_path, monkeypatch):
    """Each scheduler (Slurm once per release) with its cluster's answers recorded; what it started is ended."""
    made = driver_for(request.param, tmp_path, monkeypatch)
    yield made
    made.close()


def running(driver: Driver, spec=SPEC, name: str = "alice"):
    """A job of `name`'s that its cluster runs."""
    job, _ = driver.scheduler.submit(spec, driver.person(name))
    driver.answer(job, "RUNNING")
    return job


def test_the_log_is_what_the_run_wrote_and_tail_gives_its_last_lines(driver):
    """The job page's log and `job.logs(tail=N)`: the run's own lines after whatever the scheduler's script said
    first (the local runner's line about this machine), its last N alone with `tail`; nothing before it starts."""
    alice, scheduler = driver.person("alice"), driver.scheduler
    job, _ = scheduler.submit(SPEC, alice)
    if driver.queue:  # a job its cluster has not started has written nothing (the local runner starts it at once)
        assert scheduler.logs(job, alice) == ""
    driver.answer(job, "RUNNING")
    driver.wrote(job, RUNNING)
    lines = RUNNING.log.splitlines(keepends=True)
    assert scheduler.logs(job, alice).endswith(RUNNING.log)
    assert scheduler.logs(job, alice, tail=3) == "".join(lines[-3:])
    assert scheduler.logs(job, alice, tail=1) == lines[-1]


def test_a_sweeps_task_has_its_own_log_where_the_scheduler_runs_sweeps(driver):
    """The sweep page's log of one trial: task 1's is its own run's, never task 0's; task 0's is the default."""
    alice, scheduler = driver.person("alice"), driver.scheduler
    plan = parse_sweep({"trials": 2, "pruner": "none"}, SPEC.epochs, None, SPEC.gpus)
    if not scheduler.sweeps:  # no task has a log: there are no sweeps (test_contract_jobs checks the refusal)
        with pytest.raises(JobSpecError):
            scheduler.submit(SPEC, alice, "", plan)
        return
    job, _ = scheduler.submit(SPEC, alice, "", plan)
    zero, one = Run(said=("trial zero's own line",)), Run(said=("trial one's own line",), epochs=EPOCHS[:1])
    driver.wrote(job, zero, task=0)
    driver.wrote(job, one, task=1)
    ones = scheduler.logs(job, alice, task=1)
    assert ones.endswith(one.log) and zero.log not in ones, ones
    assert scheduler.logs(job, alice).endswith(zero.log) and one.log not in scheduler.logs(job, alice)
    assert scheduler.logs(job, alice, tail=1, task=1) == one.log.splitlines(keepends=True)[-1]


def test_metrics_are_the_runs_per_epoch_figures_with_a_retrained_epochs_last_line(driver):
    """The job page's figures (portal.metrics.RunMetrics): none before the first epoch; then the latest images/sec,
    the best mean AUROC with its epoch and per-class AUROC, the epochs done and each epoch's series. An epoch a
    resumed run trained again counts as its last record says, not as the lost checkpoint's."""
    alice = driver.person("alice")
    job = running(driver)
    assert driver.scheduler.metrics(job, alice) == RunMetrics()
    driver.wrote(job, RUNNING)
    found = driver.scheduler.metrics(job, alice)
    # TensorBoard keeps a float32: what its files give is the record's figure to 7 digits.
    assert (found.images_per_sec, found.best_mean_auroc, found.best_epoch, found.epochs_done) == \
        pytest.approx((110.0, 0.74, 3, 3)), found
    assert found.per_class_auroc == {"Atelectasis": pytest.approx(0.77)}, found
    assert found.images_per_sec_series == pytest.approx((100.0, 118.0, 110.0)), found
    assert found.mean_auroc_series == pytest.approx((0.61, 0.70, 0.74)) and found.unreadable == "", found


def test_epochs_are_one_row_per_epoch_as_the_record_says_and_none_before_the_first(driver):
    """The experiments page's per-epoch rows: each epoch's line of the record as the run wrote it (the last line of
    an epoch trained again), and no problem to tell; ({}, "") before the first epoch."""
    alice = driver.person("alice")
    job = running(driver)
    assert driver.scheduler.epochs(job, alice) == ({}, "")
    driver.wrote(job, RUNNING)
    rows, problem = driver.scheduler.epochs(job, alice)
    assert rows == {1: EPOCHS[0].to_dict(), 2: RETRAINED_TWO.to_dict(), 3: EPOCHS[3].to_dict()}
    assert problem == ""


def test_the_model_card_is_none_until_the_run_ends_with_one_then_the_card_it_wrote(driver):
    """The job page's model card: None while the run trains (its epochs recorded, no card yet); once it has ended
    with one, the card as written, with the image's digest the kubelet reports where the run could not tell it
    (Kubernetes; a scheduler without a kubelet keeps the card's null)."""
    alice = driver.person("alice")
    job = running(driver)
    driver.wrote(job, RUNNING)
    assert driver.scheduler.model_card(job, alice) is None
    driver.wrote(job, Run(card=CARD))
    expected = CARD if driver.image_digest is None else {**CARD, "environment": {
        **CARD["environment"], "image_digest": driver.image_digest, "image_digest_from": "kubelet"}}
    assert driver.scheduler.model_card(job, alice) == expected


def test_what_stands_at_the_cards_place_but_is_not_a_card_is_refused_saying_why(driver):
    """A card is the user's text: what is not one is ModelCardError (Untrusted) naming the job and the field,
    never a card the page would fail on."""
    alice = driver.person("alice")
    job = running(driver)
    driver.wrote(job, Run(card='{"format": "something-else"}'))
    with pytest.raises(ModelCardError) as refused:
        driver.scheduler.model_card(job, alice)
    assert f'of job {job.id}: format is "something-else"' in str(refused.value), refused.value
    assert isinstance(refused.value, errors.Untrusted)


def test_history_tells_a_requeue_where_the_scheduler_runs_a_job_again_and_is_empty_otherwise(driver):
    """The job page's history: [] for a job that ran once. When the job's node failed and the scheduler ran it
    again (Slurm's requeue), a line naming the node, its reason, when, and the epoch the run resumed at (from the
    log); a scheduler that never runs a job again (the local runner; Kubernetes, whose Job replaces a lost pod
    within the one run) keeps none, whatever the log says."""
    alice = driver.person("alice")
    job = running(driver)
    assert driver.scheduler.history(job, alice) == []
    driver.wrote(job, Run(said=(f"chexnet: Slurm job {job.id} restarted (restart 1)",
                                "chexnet.train: resuming from ckpt-2: continuing with epoch 3 of 3")))
    if not driver.lost_node(job):
        assert driver.scheduler.history(job, alice) == []
        return
    assert driver.scheduler.history(job, alice) == [
        f"requeued after {NODE} failed (Not responding) at {LOST_AT:%Y-%m-%d %H:%M:%S}; resumed at epoch 3"]


def test_a_job_the_cluster_holds_is_waiting_with_its_reason_and_one_that_runs_or_is_not_listed_is_not(driver):
    """The job page's "waiting because" and the board's queue line, from one snapshot: a job the cluster holds for
    GPUs is waiting, its line its own (its id, user, GPUs) with the reason in words; `queued` gives the same line
    where the scheduler's jobs are in the snapshot (`queue_in_snapshot`), else None. A job that runs waits not; a
    job the snapshot does not list, and a record of another user's naming the job, have no line."""
    scheduler = driver.scheduler
    before = scheduler.snapshot()
    job, _ = scheduler.submit(WHOLE_NODE, driver.person("alice"))
    assert scheduler.queued(before, job) is None and scheduler.waiting(before, job) is None
    if driver.queue:
        driver.answer(job, "PENDING")
        held = scheduler.snapshot()
        line = scheduler.waiting(held, job)
        assert line is not None and (line.id, line.user, line.state, line.gpus) == (job.id, "alice", "PENDING", 4)
        assert line.waits_for_resources and "GPU" in line.reason_words, line
        assert scheduler.queued(held, job) == (line if scheduler.queue_in_snapshot else None)
        claimed = dataclasses.replace(job, user="bob")  # bob's record (a job.json he edited) naming her job
        assert scheduler.waiting(held, claimed) is None and scheduler.queued(held, claimed) is None
    driver.answer(job, "RUNNING")
    runs = scheduler.snapshot()
    assert scheduler.waiting(runs, job) is None
    queued = scheduler.queued(runs, job)
    if scheduler.queue_in_snapshot:
        assert queued is not None and (queued.state, queued.user) == ("RUNNING", "alice"), queued
    else:
        assert queued is None


def test_the_start_note_names_what_holds_the_gpus_a_job_needs_and_is_empty_when_it_can_start(driver):
    """The submit form's warning, from a snapshot taken before the submit: a job that needs NODE's GPUs while her
    own job holds them all will wait for that job (named to her, "other users' jobs" to bob), saying what NODE
    has free; a job that fits says nothing. The local runner has no snapshot of free GPUs to tell: "" always."""
    holder = running(driver, WHOLE_NODE)
    snapshot = driver.scheduler.snapshot()
    hers, his = (driver.scheduler.start_note(WHOLE_NODE, name, snapshot) for name in ("alice", "bob"))
    assert driver.scheduler.start_note(SPEC, "alice", snapshot) == ""
    if not driver.queue:
        assert (hers, his) == ("", "")
        return
    free = f"{NODE} has 0 of {NODE_GPUS} GPUs free"
    assert hers == f"will wait for your job {holder.id} to end: {free}", hers
    assert his == f"will wait for other users' jobs to end: {free}", his


READS = {
    "logs": lambda scheduler, job, user: scheduler.logs(job, user),
    "metrics": lambda scheduler, job, user: scheduler.metrics(job, user),
    "epochs": lambda scheduler, job, user: scheduler.epochs(job, user),
    "model_card": lambda scheduler, job, user: scheduler.model_card(job, user),
    "history": lambda scheduler, job, user: scheduler.history(job, user),
}


@pytest.mark.parametrize("read", READS)
def test_another_users_read_of_a_job_is_not_found_and_gives_nothing_of_it(driver, read):
    """Whatever the scheduler reads a job's output from (files as the user, their pods as the user), bob handed
    alice's record is answered as for a job he does not have (404), not with her run's output, figures or card."""
    bob = driver.person("bob")
    job = running(driver)
    driver.wrote(job, RUNNING)
    driver.wrote(job, Run(card=a_card()))
    with pytest.raises(JobNotFound) as refused:
        READS[read](driver.scheduler, job, bob)
    status, said, _ = errors.answer(refused.value)
    assert status == 404 and "bob" in said and "alice" not in said, said
    assert READS[read](driver.scheduler, job, driver.person("alice")) is not None  # hers to read
