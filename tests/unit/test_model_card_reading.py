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
