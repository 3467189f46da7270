"""programkit.data.synthetic: the layout it writes, its label statistics and its learnable marks."""

import subprocess
import sys

import numpy as np
from PIL import Image

from programkit.data.chestxray14 import labels_matrix, load_index
from programkit.data.synthetic import MARK_BRIGHTNESS, _shape_masks, render, sample_labels, write_synthetic
from programkit.labels import NUM_CLASSES


def test_cli_writes_the_layout_of_greyscale_pngs(tmp_path):
    out = tmp_path / "d"
    subprocess.run([sys.executable, "-m", "programkit.data.synthetic", "--out", str(out), "--images", "30",
                    "--size", "32", "--seed", "1", "--patients", "10"], check=True, capture_output=True)
    pngs = sorted((out / "images").glob("*.png"))
    assert len(pngs) == 30
    with Image.open(pngs[0]) as image:
        assert image.mode == "L" and image.size == (32, 32)
    index = load_index(out)
    assert len(index.train) + len(index.val) + len(index.test) == 30
    assert len({r.patient_id for r in index.train + index.val + index.test}) == 10


def test_same_seed_same_data(tmp_path):
    a, b = write_synthetic(tmp_path / "a", 12, 16, seed=4), write_synthetic(tmp_path / "b", 12, 16, seed=4)
    assert (a / "Data_Entry_2017.csv").read_text() == (b / "Data_Entry_2017.csv").read_text()
    name = sorted((a / "images").iterdir())[5].name
    assert (a / "images" / name).read_bytes() == (b / "images" / name).read_bytes()


def test_label_frequencies_look_like_the_real_set():
    labels = sample_labels(5000, np.random.default_rng(0))
    no_finding = (labels.sum(axis=1) == 0).mean()
    prevalence = labels.mean(axis=0)
    assert 0.45 < no_finding < 0.55
    assert prevalence.argmax() == 3  # Infiltration, the most common finding
    assert 0.002 < prevalence[13] < 0.012  # Hernia, rare
    assert (labels.sum(axis=1) > 1).mean() > 0.1  # multi-label rows happen


def test_every_class_is_present_a_few_times_from_200_images():
    labels = sample_labels(200, np.random.default_rng(7))
    assert labels.sum(axis=0).min() >= 5


def test_test_split_is_about_a_fifth_of_the_patients(tmp_path):
    index = load_index(write_synthetic(tmp_path / "d", 300, 16, seed=2))
    test_patients = {r.patient_id for r in index.test}
    all_patients = test_patients | {r.patient_id for r in index.train + index.val}
    assert 0.15 < len(test_patients) / len(all_patients) < 0.25
    assert labels_matrix(index.train).shape[1] == NUM_CLASSES


def test_each_class_mark_brightens_its_own_cell_only():
    size = 64
    blank = render(np.zeros(NUM_CLASSES), size, np.random.default_rng(1)).astype(float)
    for k in range(NUM_CLASSES):
        labels = np.zeros(NUM_CLASSES)
        labels[k] = 1
        diff = render(labels, size, np.random.default_rng(1)).astype(float) - blank
        row, col = divmod(k, 4)
        cell = diff[row * 16:(row + 1) * 16, col * 16:(col + 1) * 16]
        assert cell.max() > MARK_BRIGHTNESS * 0.8
        assert np.abs(diff).sum() == np.abs(cell).sum()  # nothing changed outside the class's cell


def test_marks_survive_a_horizontal_flip_and_differ_from_each_other():
    masks = _shape_masks(13)
    assert all((mask == mask[:, ::-1]).all() for mask in masks)  # training flips; the shape must still say the class
    assert len({mask.tobytes() for mask in masks}) == NUM_CLASSES
