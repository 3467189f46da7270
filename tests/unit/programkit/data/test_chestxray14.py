"""programkit.data.chestxray14: reading the ChestX-ray14 layout, splitting by patient, and reporting bad rows."""

import csv
import logging

import numpy as np
import pytest

from programkit.data.chestxray14 import CSV_NAME, TEST_LIST, TRAIN_VAL_LIST, DataError, load_index
from programkit.data.synthetic import write_synthetic
from programkit.labels import encode

IMAGES = 60
SIZE = 16


@pytest.fixture
def layout(tmp_path):
    return write_synthetic(tmp_path / "data", IMAGES, SIZE, seed=3, patients=20)


def _rows(root):
    with open(root / CSV_NAME, newline="") as f:
        return list(csv.reader(f))


def _write_rows(root, rows):
    with open(root / CSV_NAME, "w", newline="") as f:
        csv.writer(f).writerows(rows)


def test_splits_cover_the_lists_and_keep_patients_apart(layout):
    index = load_index(layout, val_fraction=0.2, seed=1)
    ids = {split: {r.image_id for r in getattr(index, split)} for split in ("train", "val", "test")}
    train_val = set((layout / TRAIN_VAL_LIST).read_text().split())
    assert ids["train"] | ids["val"] == train_val and not ids["train"] & ids["val"]
    assert ids["test"] == set((layout / TEST_LIST).read_text().split())
    patients = {split: {r.patient_id for r in getattr(index, split)} for split in ("train", "val", "test")}
    assert not patients["train"] & patients["val"] and not patients["val"] & patients["test"]
    assert not patients["train"] & patients["test"]
    assert index.val and index.skipped == 0


def test_validation_split_is_deterministic_for_a_seed(layout):
    first, again = load_index(layout, seed=5), load_index(layout, seed=5)
    assert [r.image_id for r in first.val] == [r.image_id for r in again.val]


def test_labels_match_the_csv(layout):
    expected = {row[0]: encode(row[1]) for row in _rows(layout)[1:]}
    index = load_index(layout)
    for record in index.train + index.val + index.test:
        assert record.labels.dtype == np.float32
        np.testing.assert_array_equal(record.labels, expected[record.image_id])
        assert record.path.is_file()


def test_missing_directory_and_missing_files(tmp_path, layout):
    with pytest.raises(DataError, match="does not exist"):
        load_index(tmp_path / "nowhere")
    (layout / TEST_LIST).unlink()
    with pytest.raises(DataError, match=f"missing {TEST_LIST}"):
        load_index(layout)


def test_empty_csv(layout):
    (layout / CSV_NAME).write_text("")
    with pytest.raises(DataError, match="is empty"):
        load_index(layout)


def test_unknown_labels_are_counted_and_named(layout):
    rows = _rows(layout)
    for line in (3, 8, 9):  # file line numbers; rows[0] is line 1, the header
        rows[line - 1][1] = "Pneumonitis"
    _write_rows(layout, rows)
    with pytest.raises(DataError, match=r"3 rows with unknown labels, e\.g\. row 3: 'Pneumonitis'.*allowed: Atel"):
        load_index(layout)


def test_missing_images_and_malformed_rows(layout):
    rows = _rows(layout)
    (layout / "images" / rows[1][0]).unlink()
    rows[2][3] = ""  # no Patient ID
    _write_rows(layout, rows)
    with pytest.raises(DataError) as error:
        load_index(layout)
    message = str(error.value)
    assert f"1 rows whose image file is missing, e.g. row 2: images/{rows[1][0]}" in message
    assert "1 malformed rows, e.g. row 3: empty Patient ID" in message


def test_skip_bad_leaves_bad_rows_out_with_a_warning(layout, caplog):
    rows = _rows(layout)
    bad = {rows[1][0], rows[2][0]}
    rows[1][1] = rows[2][1] = "Pneumonitis"
    _write_rows(layout, rows)
    with caplog.at_level(logging.WARNING):
        index = load_index(layout, skip_bad=True)
    assert index.skipped == 2 and "leaving out 2 bad records" in caplog.text
    kept = {r.image_id for r in index.train + index.val + index.test}
    assert len(kept) == IMAGES - 2 and not kept & bad
