"""Horovod's collectives traced without AutoGraph: each rank starts about 2 CPU-seconds sooner.

Horovod 0.28.1 (pinned; its last release) wraps what it traces in eager mode, the gradients' allreduce and the
variables' broadcast, in `tf.function(f)` (`horovod/tensorflow/util.py: _make_subgraph`), AutoGraph on. Those
functions were written for TF1's graphs: plain Python over lists of tensors, their branches already `tf.cond`.
AutoGraph finds nothing to convert in them, yet rewrites each one and every helper it calls from source (`allreduce`
eleven times in a tiny model's step), and that was a fifth of a tiny model's run: 2.0 CPU-s of 10.5 (median of five
side-by-side pairs, one worker, tinycnn at 64 px, one epoch of 400 images, 2026-11-30; wall time 0.85 of before).
The traced graph is the same either way, so the numbers are too.

Horovod has no setting for it; the two modules that import `_make_subgraph` get one that turns AutoGraph off.
Nothing happens where a Horovod has no such function (a later release): `tests/unit/chexnet/test_horovod_graphs.py`
says so for the pinned one.
"""

from __future__ import annotations

from collections.abc import Callable

SUBGRAPH_MAKER = "_make_subgraph"


def _subgraph(function: Callable) -> Callable:
    import tensorflow as tf

    return tf.function(function, autograph=False)


def trace_collectives_without_autograph() -> list[str]:
    """Make Horovod's eager-mode subgraphs without AutoGraph, before the first is made (hvd.init() may come first).
    Returns the modules changed."""
    import horovod.tensorflow as hvd_tf
    import horovod.tensorflow.functions as hvd_functions

    changed = []
    for module in (hvd_tf, hvd_functions):
        if callable(getattr(module, SUBGRAPH_MAKER, None)):
            setattr(module, SUBGRAPH_MAKER, _subgraph)
            changed.append(module.__name__)
    return changed
