"""The dashboard reads a job's model card as hostile text (portal.scheduler.home): a card, nothing yet, or why
the file at its path is not one, naming the field (programkit.schemas.MODEL_CARD), whatever type each field holds."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from portal.config import PortalConfig
from portal.records.record import JobRecord
from portal.records.spec import JobSpec
from portal.scheduler.home import MAX_CARD_BYTES, ModelCardError
from portal.scheduler.slurm.scheduler import SlurmScheduler
from programkit.model_card import CARD_FILE
from tests.cards import a_card, replaced, wrong_type_cards

RECORD = JobRecord(id="42", scheduler="slurm", user="alice", spec=JobSpec(data_dir="/d"),
                   submitted_at="2026-01-01T00:00:00+00:00", job_dir=Path("/home/alice/jobs/42"))


class Files:
    """A JobUser's bounded read, of one file's text (None: missing or unreadable for the user), as alice."""

    name = "alice"

    def __init__(self, text: str | None):
        self.text, self.asked = text, []

    def read_text(self, path: Path, limit: int) -> str | None:
        self.asked.append((path, limit))
        return None if self.text is None else self.text[:limit + 1]


def read(text: str | None):
    return SlurmScheduler(PortalConfig()).model_card(RECORD, Files(text))


def test_a_card_is_read_from_beside_the_checkpoint():
    files = Files(json.dumps(a_card()))
    card = SlurmScheduler(PortalConfig()).model_card(RECORD, files)
    assert card == a_card()
    assert files.asked == [(Path("/home/alice/jobs/42/checkpoints") / CARD_FILE, MAX_CARD_BYTES)]
    assert read(None) is None  # not written yet


def test_a_card_written_before_frameworks_names_its_versions_as_a_new_one_does():
    old = a_card()
    old["environment"] = {"python": "3.11.9", "tensorflow": "2.15.1", "horovod": "0.28.1", "torch": 7,
                          "numpy": "1.26.4"}
    card = read(json.dumps(old))
    assert card["environment"]["frameworks"] == {"TensorFlow": "2.15.1", "Horovod": "0.28.1"}  # text only
    new = a_card()
    new["environment"]["frameworks"]["PyTorch"] = None  # a version its program could not tell
    assert read(json.dumps(new))["environment"]["frameworks"] == {"TensorFlow": "2.15.1", "Horovod": "0.28.1"}


@pytest.mark.parametrize("text, why", [
    ("x" * (MAX_CARD_BYTES + 10), "more than"),
    ("{not json", "model_card.json of job 42"),
    ('{"format": "something-else"}', 'job 42: format is "something-else" \\(a string\\); expected dsportal-model'),
    ("[1, 2]", r"job 42: the whole record is \[1, 2\] \(a list\); expected an object of format dsportal-model"),
    ('{"format": "dsportal-model-card-1"}', "job 42: spec is missing; expected an object of the run's settings"),
    ('{"format": "dsportal-model-card-1", "auroc": NaN}', "model_card.json of job 42"),
])
def test_what_is_not_a_card_says_why(text, why):
    with pytest.raises(ModelCardError, match=why):
        read(text)


# What may stand in a field's place besides its own type: null where the writer writes null when it does not know
# (no git checkout, no Horovod, an undefined AUROC, no checkpoint yet), and any single value among the settings.
NULLABLE = {"code.dsportal", "code.git_commit", "code.git_dirty", "environment.python",
            "environment.frameworks.TensorFlow", "environment.frameworks.Horovod", "environment.numpy",
            "environment.image_digest", "auroc.per_class[0].auroc", "auroc.per_class[0].paper", "auroc.mean",
            "auroc.paper_mean", "checkpoint.prefix"}
SCALARS = ("null", "true/false", "a number", "a string")


def taken(path: str, kind: str) -> bool:
    return kind == "null" and path in NULLABLE or path.startswith("spec.") and kind in SCALARS


@pytest.mark.parametrize("path, kind, card", list(wrong_type_cards(a_card())),
                         ids=lambda value: value if isinstance(value, str) else "")
def test_each_field_of_another_type_is_named_and_nothing_else_is_raised(path, kind, card):
    """Every field of a whole card, given each JSON type but its own: the card is read only where the writer
    could have written that, and otherwise ModelCardError names the field (or the first missing one inside the
    object given in its place) and what it held; never a KeyError, TypeError or the like."""
    if taken(path, kind):
        shown = json.loads(json.dumps(card))  # the frameworks the page names: those with a version
        shown["environment"]["frameworks"] = {name: version for name, version
                                              in card["environment"]["frameworks"].items() if version is not None}
        assert read(json.dumps(card)) == shown
        return
    with pytest.raises(ModelCardError) as raised:
        read(json.dumps(card))
    message = str(raised.value)
    assert re.match(rf"model_card\.json of job 42: {re.escape(path)}[ .\[]", message), message
    if message.startswith(f"model_card.json of job 42: {path} is "):
        assert f"({kind}); expected " in message or kind == "null" and " is null; expected " in message, message


@pytest.mark.parametrize("path, value, why", [
    ("data.counts", [30, 5, 5], "data.counts is [30, 5, 5] (a list); expected an object of image counts per split"),
    ("checkpoint.files", 5, "checkpoint.files is 5 (a number); expected a list of files"),
    ("code.git_commit", 12345, "code.git_commit is 12345 (a number); expected a git commit (a string) or null"),
    ("data", 7, "data is 7 (a number); expected an object with dir, kind and counts"),
    ("auroc.mean", "0.9", 'auroc.mean is "0.9" (a string); expected a number or null'),
])
def test_the_cards_that_made_the_job_page_fail_are_unreadable_saying_why(path, value, why):
    with pytest.raises(ModelCardError) as raised:
        read(json.dumps(replaced(a_card(), path, value)))
    assert str(raised.value) == f"model_card.json of job 42: {why}"


def test_what_the_run_writes_is_checked_as_the_dashboard_reads_it(tmp_path):
    from programkit.model_card import write_card
    from programkit.schemas import SchemaError

    assert read((write_card(tmp_path, a_card())).read_text()) == a_card()
    with pytest.raises(SchemaError, match=r"model_card.json to write: auroc.mean is NaN \(a number\); expected"):
        write_card(tmp_path / "other", replaced(a_card(), "auroc.mean", float("nan")))
    assert not (tmp_path / "other").exists()  # nothing written, not even a part


def test_on_kubernetes_the_card_is_the_last_card_line_of_the_pods_log_with_the_kubelets_digest():
    from portal.scheduler.kubernetes.records import card_from_log

    card = {**a_card(), "environment": {"python": "3.11", "frameworks": {"TensorFlow": "2.15.1"}, "image_digest": None},
            "epochs_done": 3}
    digest = "sha256:" + "ab" * 32
    log = ("chexnet.train: epoch 3/3: auroc/mean=0.9\n"
           f"chexnet: model card {json.dumps({**card, 'epochs_done': 1})}\n"  # an earlier run's, resumed since
           f"chexnet: model card {json.dumps(card)}\nchexnet: done\n")
    found = card_from_log(log, "k8s-1", f"localhost/dsportal-training@{digest}")
    assert found["epochs_done"] == 3
    assert found["environment"] == {"python": "3.11", "frameworks": {"TensorFlow": "2.15.1"}, "image_digest": digest,
                                    "image_digest_from": "kubelet"}
    assert card_from_log("chexnet: training\n", "k8s-1") is None  # not written yet
    written = {**card, "environment": {**card["environment"], "image_digest": "sha256:" + "cd" * 32}}  # kept
    assert card_from_log(f"chexnet: model card {json.dumps(written)}", "k8s-1", digest)["environment"] == \
        written["environment"]
    for bad in ("chexnet: model card {", "chexnet: model card []", 'chexnet: model card {"format": "x"}',
                "chexnet: model card " + json.dumps({**card, "x": float("nan")}),
                "chexnet: model card " + json.dumps({**card, "data": 7})):
        with pytest.raises(ModelCardError):
            card_from_log(bad, "k8s-1", digest)
