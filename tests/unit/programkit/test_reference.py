"""programkit.reference: the constants the hub and the trainer share, defined once and importable without TensorFlow."""

from __future__ import annotations

import subprocess
import sys

from programkit import reference
from programkit.labels import CLASSES


def test_the_hub_side_imports_the_shared_constants_without_tensorflow_or_numpy():
    script = ("import sys\n"
              "import portal.records.spec, portal.reference\n"
              "from portal.records.programs import registry\n"
              "programs = registry()\n"  # every registered program's declaration, read by the hub
              "loaded = sorted({'tensorflow', 'numpy', 'horovod', 'torch'} & set(sys.modules))\n"
              "assert not loaded, loaded\n"
              "assert programs.get('chexnet').models is __import__('programkit.reference').reference.MODELS\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_the_paper_table_is_one_table_in_the_label_order():
    from portal import reference as portal_reference

    assert tuple(reference.CHEXNET_PAPER_AUROC) == CLASSES
    assert portal_reference.CHEXNET_PAPER_AUROC is reference.CHEXNET_PAPER_AUROC
    assert round(reference.chexnet_paper_mean(), 4) == 0.8414
