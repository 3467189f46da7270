"""chexnet.horovod_graphs: Horovod's collectives traced without AutoGraph, to the same numbers."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import REPO

# One process (size 1: Horovod's allreduce still goes into the graph, under its tf.cond), one Keras step of a
# DistributedOptimizer and the broadcast of the variables: which Horovod functions AutoGraph rewrote, and the
# weights after the step.
STEP = """
import hashlib, json, sys
import numpy as np
import tensorflow as tf
from tensorflow.python.autograph.pyct import transpiler
import horovod.tensorflow.keras as hvd
from chexnet.horovod_graphs import trace_collectives_without_autograph

rewritten = []
transform = transpiler.PyToPy.transform_function
def counted(self, fn, *args, **kwargs):
    rewritten.append(getattr(fn, "__module__", "") or "")
    return transform(self, fn, *args, **kwargs)
transpiler.PyToPy.transform_function = counted

hvd.init()
changed = trace_collectives_without_autograph() if sys.argv[1] == "off" else []
tf.keras.utils.set_random_seed(0)
model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(3), tf.keras.layers.Dense(1)])
model.compile(optimizer=hvd.DistributedOptimizer(tf.keras.optimizers.Adam(0.1)), loss="mse")
x, y = np.arange(32, dtype="float32").reshape(8, 4) / 32, np.ones((8, 1), "float32")
model.fit(x, y, epochs=2, batch_size=4, verbose=0, shuffle=False,
          callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
weights = hashlib.sha256(b"".join(w.tobytes() for w in model.get_weights())).hexdigest()
print(json.dumps({"changed": changed, "horovod_rewritten": sum(m.startswith("horovod") for m in rewritten),
                  "weights": weights}))
"""


def step(autograph: str) -> dict:
    done = subprocess.run([sys.executable, "-c", STEP, autograph], cwd=REPO, capture_output=True, text=True,
                          timeout=300, env={"TF_CPP_MIN_LOG_LEVEL": "3", "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


def test_horovods_subgraphs_are_traced_without_autograph_to_the_same_weights():
    before, after = step("on"), step("off")
    # The pinned Horovod makes its subgraphs in both modules: a release without them would leave this to AutoGraph.
    assert after["changed"] == ["horovod.tensorflow", "horovod.tensorflow.functions"]
    assert before["horovod_rewritten"] > 0  # what it saves: AutoGraph rewrote Horovod's allreduce and broadcast
    assert after["horovod_rewritten"] == 0
    assert after["weights"] == before["weights"]
