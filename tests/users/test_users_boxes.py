"""After every suite: the users' own boxes (a `make up` and a `make up-k8s` beside the tests' boxes) are as the
suites found them (tests/users_boxes.py says what that means). `make test` takes the snapshot before the suites
and runs this last; run alone, without a snapshot of this machine's boot, it fails saying so."""

from __future__ import annotations

import json
import time

import pytest

from tests import users_boxes
from tests.conftest import CLUSTER


def test_the_suites_left_every_file_record_process_and_mail_of_the_users_boxes_as_they_found_them():
    if not users_boxes.SNAPSHOT.exists():
        pytest.fail(f"no snapshot of the users' boxes at {users_boxes.SNAPSHOT}: `make test` takes it before the "
                    "suites (python -m tests.users_boxes snapshot), then runs this test after them", pytrace=False)
    before = json.loads(users_boxes.SNAPSHOT.read_text())
    after = users_boxes.snapshot(CLUSTER, marks_kept=True)
    problems = users_boxes.compare(before, after, CLUSTER)
    if problems:  # a process or pod that was just ending may have been caught between two looks: look again once
        time.sleep(5)
        problems = users_boxes.compare(before, users_boxes.snapshot(CLUSTER, marks_kept=True), CLUSTER)
    print(f"\nusers' boxes: {sum(len(t) for t in before['homes'].values())} files in the homes, "
          f"{len(before['slurm'])} Slurm jobs, {len(before['processes'])} processes and {len(before['pods'])} pods "
          "before the suites; compared after them")
    assert problems == [], "\n".join(problems)
