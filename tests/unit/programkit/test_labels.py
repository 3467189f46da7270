"""programkit.labels: the 14 classes and the "Finding Labels" codec."""

import numpy as np
import pytest

from programkit.labels import CLASSES, NUM_CLASSES, UnknownLabel, decode, encode


def test_the_fourteen_classes_in_the_dataset_order():
    assert NUM_CLASSES == 14
    assert CLASSES[0] == "Atelectasis" and CLASSES[-1] == "Hernia"


def test_no_finding_is_all_zeros():
    vector = encode("No Finding")
    assert vector.dtype == np.float32 and vector.shape == (14,) and not vector.any()


def test_multi_label_round_trip():
    vector = encode("Effusion|Mass")
    assert vector[CLASSES.index("Effusion")] == 1 and vector[CLASSES.index("Mass")] == 1 and vector.sum() == 2
    assert decode(vector) == "Effusion|Mass"
    assert decode(np.zeros(14)) == "No Finding"


def test_unknown_label_names_it_and_the_allowed_ones():
    with pytest.raises(UnknownLabel, match="'Pneumonitis'.*Atelectasis"):
        encode("Effusion|Pneumonitis")
