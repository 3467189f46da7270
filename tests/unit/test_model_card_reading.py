"""The dashboard reads a job's model card as hostile text (portal.scheduler.home): a card, nothing yet, or why
the file at its path is not one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chexnet.model_card import CARD_FILE, CARD_FORMAT
from portal.config import PortalConfig
from portal.jobs.record import JobRecord
from portal.jobs.spec import JobSpec
from portal.scheduler.home import MAX_CARD_BYTES, ModelCardError
from portal.scheduler.slurm import SlurmScheduler

RECORD = JobRecord(id="42", backend="slurm", user="alice", spec=JobSpec(data_dir="/d"),
                   submitted_at="2026-01-01T00:00:00+00:00", job_dir=Path("/home/alice/jobs/42"))


class Files:
    """A JobUser's bounded read, of one file's text (None: missing or unreadable for the user)."""

    def __init__(self, text: str | None):
        self.text, self.asked = text, []

    def read_text(self, path: Path, limit: int) -> str | None:
        self.asked.append((path, limit))
        return None if self.text is None else self.text[:limit + 1]


def read(text: str | None):
    return SlurmScheduler(PortalConfig()).model_card(RECORD, Files(text))


def test_a_card_is_read_from_beside_the_checkpoint():
    files = Files(json.dumps({"format": CARD_FORMAT, "epochs_done": 2}))
    card = SlurmScheduler(PortalConfig()).model_card(RECORD, files)
    assert card == {"format": CARD_FORMAT, "epochs_done": 2}
    assert files.asked == [(Path("/home/alice/jobs/42/checkpoints") / CARD_FILE, MAX_CARD_BYTES)]
    assert read(None) is None  # not written yet


@pytest.mark.parametrize("text, why", [
    ("x" * (MAX_CARD_BYTES + 10), "more than"),
    ("{not json", "model_card.json of job 42"),
    ('{"format": "something-else"}', "is not a model card of format"),
    ("[1, 2]", "is not a model card"),
    ('{"format": "dsportal-model-card-1", "auroc": NaN}', "model_card.json of job 42"),
])
def test_what_is_not_a_card_says_why(text, why):
    with pytest.raises(ModelCardError, match=why):
        read(text)


def test_on_kubernetes_the_card_is_the_last_card_line_of_the_pods_log_with_the_kubelets_digest():
    from portal.jobs import k8s_manifests  # noqa: F401  (portal.jobs before portal.scheduler.kube_records)
    from portal.scheduler.kube_records import card_from_log

    card = {"format": CARD_FORMAT, "environment": {"python": "3.11", "image_digest": None}, "epochs_done": 3}
    digest = "sha256:" + "ab" * 32
    log = ("chexnet.train: epoch 3/3: auroc/mean=0.9\n"
           f"chexnet: model card {json.dumps({**card, 'epochs_done': 1})}\n"  # an earlier run's, resumed since
           f"chexnet: model card {json.dumps(card)}\nchexnet: done\n")
    found = card_from_log(log, "k8s-1", f"localhost/dsportal-training@{digest}")
    assert found["epochs_done"] == 3
    assert found["environment"] == {"python": "3.11", "image_digest": digest, "image_digest_from": "kubelet"}
    assert card_from_log("chexnet: training\n", "k8s-1") is None  # not written yet
    written = {**card, "environment": {"image_digest": "sha256:" + "cd" * 32}}  # the run knew it: kept
    assert card_from_log(f"chexnet: model card {json.dumps(written)}", "k8s-1", digest)["environment"] == \
        written["environment"]
    for bad in ("chexnet: model card {", "chexnet: model card []", 'chexnet: model card {"format": "x"}',
                "chexnet: model card " + json.dumps({"format": CARD_FORMAT, "x": float("nan")})):
        with pytest.raises(ModelCardError):
            card_from_log(bad, "k8s-1", digest)
