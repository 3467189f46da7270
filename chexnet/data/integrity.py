"""Records that cannot be read are skipped and counted, per file; too many of them stop training with a message.

Where a bad record shows up, and how it is counted:
- a damaged TFRecord shard (cut short, a flipped byte: the CRC fails) raises DataLossError at the damage; the read of
  that shard ends there (`ignore_errors`) and the records it did not yield are `lost` (the manifest says how many
  it holds), and the read counts as `damaged`;
- a record that does not parse (a missing feature, bytes that are no Example) or whose image does not decode is
  `bad`: parse and decode run in `guarded`, which turns any error into a validity flag, so the count is exact and
  names the record's file.
Every dataset has its own `SkipCounter` (int64 variables indexed by the file's position in its split), updated by
the pipeline's own ops from whichever thread met the record. `Counts` is a snapshot; the difference of two is what
happened in between (an epoch). A training stream that yields nothing readable for a whole pass over its files
fails with `UNREADABLE_MARK` in the error instead of looping forever (`unreadable_message` turns it into a line).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tensorflow as tf

DEFAULT_MAX_SKIPPED_FRACTION = 0.1  # more than this share of a split unreadable in an epoch stops training
UNREADABLE_MARK = "chexnet-unreadable-data"
FILES_NAMED = 5  # how many files a message names
GUARDED_CHUNK = 32  # records decoded under one guard: a bad record costs its chunk a second, careful decode


@dataclass(frozen=True)
class Counts:
    """Per file of a split: records decoded (`good`), that did not parse or decode (`bad`), that a damaged file did
    not yield (`lost`), reads of the file that ended at damage (`damaged`), and records the reader yielded (`read`).
    The reader runs ahead of the decoder (shuffle buffer, prefetch): the share skipped is taken over what was read."""

    split: str
    files: tuple[str, ...]
    good: np.ndarray
    bad: np.ndarray
    lost: np.ndarray
    damaged: np.ndarray
    read: np.ndarray

    def __sub__(self, earlier: Counts) -> Counts:
        return self.replace(*(now - then for now, then in zip(self.arrays(), earlier.arrays(), strict=True)))

    def arrays(self) -> tuple[np.ndarray, ...]:
        return self.good, self.bad, self.lost, self.damaged, self.read

    def replace(self, *arrays: np.ndarray) -> Counts:
        return Counts(self.split, self.files, *arrays)

    @property
    def skipped(self) -> int:
        return int(self.bad.sum() + self.lost.sum())

    @property
    def total(self) -> int:
        """The records the files should have yielded in the reads made."""
        return int(self.read.sum() + self.lost.sum())

    @property
    def fraction(self) -> float:
        return min(1.0, self.skipped / self.total) if self.total else 0.0

    def exceeds(self, max_fraction: float) -> bool:
        """More than `max_fraction` of what was tried is unreadable (nothing readable at all always is)."""
        return self.skipped > 0 and (self.fraction > max_fraction or self.skipped >= self.total)

    def describe(self) -> str:
        """'3 of 120 train records skipped (2.5%): train-00001-of-00004.tfrecord damaged, 2 records lost; ...'."""
        problems = [_file_problem(Path(self.files[i]).name, int(self.bad[i]), int(self.lost[i]), int(self.damaged[i]))
                    for i in np.flatnonzero(self.bad + self.lost + self.damaged)]
        more = f"; and {len(problems) - FILES_NAMED} more files" if len(problems) > FILES_NAMED else ""
        return (f"{self.skipped} of {self.total} {self.split} records skipped ({self.fraction:.1%}): "
                + "; ".join(problems[:FILES_NAMED]) + more)


def _file_problem(name: str, bad: int, lost: int, damaged: int) -> str:
    parts = [f"damaged (read stopped at the damage), {lost} records lost"] if damaged or lost else []
    parts += [f"{bad} records that do not parse or decode"] if bad else []
    return f"{name} " + ", ".join(parts)


class SkipCounter:
    """What one dataset of this process skipped, per file of its split (`files`: the split's files in order).

    `shared_reads`: every worker reads every file (element sharding), so each one counts the same lost records;
    combine `lost`, `damaged` and `read` across workers with a maximum, not a sum. `limit`: a stream that reads no
    record, or decodes none, in this many in a row (a whole pass over its files) fails instead of looping forever;
    None: no limit. The reader and the decoder are guarded apart: the reader runs a shuffle buffer ahead."""

    def __init__(self, split: str, files: Sequence[str], shared_reads: bool, limit: int | None = None) -> None:
        self.split, self.files, self.shared_reads, self.limit = split, tuple(files), shared_reads, limit
        size = max(1, len(self.files))
        with tf.init_scope():  # plain process-wide variables, even if a pipeline is built inside a tf.function
            self.outcomes = tf.Variable(tf.zeros([size, 2], tf.int64), trainable=False, name=f"{split}_outcomes")
            self.lost = tf.Variable(tf.zeros([size], tf.int64), trainable=False, name=f"{split}_lost")
            self.damaged = tf.Variable(tf.zeros([size], tf.int64), trainable=False, name=f"{split}_damaged")
            self.read = tf.Variable(tf.zeros([size], tf.int64), trainable=False, name=f"{split}_read")
            self.read_run = tf.Variable(0, dtype=tf.int64, trainable=False, name=f"{split}_lost_in_a_row")
            self.decode_run = tf.Variable(0, dtype=tf.int64, trainable=False, name=f"{split}_bad_in_a_row")

    def count_outcome(self, example: tuple, valid: tf.Tensor, file: tf.Tensor) -> tuple:
        """(example, valid, file) from `guarded` -> (example, valid), with the outcome counted."""
        index = tf.stack([tf.cast(file, tf.int64), tf.cast(valid, tf.int64)])[None]
        updates = [self.outcomes.scatter_nd_add(index, tf.ones([1], tf.int64)),
                   self.decode_run.assign(tf.where(valid, tf.constant(0, tf.int64), self.decode_run + 1))]
        with tf.control_dependencies(updates):
            with tf.control_dependencies(self._check(self.decode_run, "decoded")):
                return tf.nest.map_structure(tf.identity, example), tf.identity(valid)

    def count_record(self, file: tf.Tensor) -> list[tf.Operation]:
        """The reader yielded a record of `file`: the ops that count it."""
        index = tf.cast(file, tf.int64)[None, None]
        return [self.read.scatter_nd_add(index, tf.ones([1], tf.int64)), self.read_run.assign(0)]

    def count_read(self, file: tf.Tensor, read: tf.Tensor, expected: tf.Tensor) -> list[tf.Operation]:
        """A read of `file` ended after `read` records of `expected`: the ops that count what it lost."""
        lost = tf.maximum(expected - read, 0)
        index = tf.cast(file, tf.int64)[None, None]
        updates = [self.lost.scatter_nd_add(index, lost[None]),
                   self.damaged.scatter_nd_add(index, tf.cast(lost > 0, tf.int64)[None]),
                   self.read_run.assign_add(lost)]
        with tf.control_dependencies(updates):
            return self._check(self.read_run, "read") or [tf.no_op()]

    def _check(self, run: tf.Variable, what: str) -> list[tf.Operation]:
        if self.limit is None:
            return []
        message = (f"{UNREADABLE_MARK}: no {self.split} record could be {what} in {self.limit} tries in a row "
                   "(a whole pass over this worker's files)")
        return [tf.debugging.Assert(run < self.limit, [message])]

    def snapshot(self) -> Counts:
        outcomes = self.outcomes.numpy()
        size = len(self.files)
        return Counts(self.split, self.files, outcomes[:size, 1], outcomes[:size, 0], self.lost.numpy()[:size],
                      self.damaged.numpy()[:size], self.read.numpy()[:size])

    def reset(self) -> None:
        for variable in (self.outcomes, self.lost, self.damaged, self.read, self.read_run, self.decode_run):
            variable.assign(tf.zeros_like(variable))


def guarded(decode: Callable[..., tuple]) -> Callable[..., tf.data.Dataset]:
    """`decode(*data)` -> a function of (*data, file) giving ONE element (decoded, valid, file): the decoded example,
    or zeros of its shape and valid False if parsing or decoding raised. tf.data has no try/except: the decode runs
    in a one-element dataset that `ignore_errors` may leave empty, and a placeholder follows it; `take(1)` keeps
    whichever comes first. Flat-map or interleave over it."""

    def one(*element: tf.Tensor) -> tf.data.Dataset:
        *data, file = element
        decoded = tf.data.Dataset.from_tensors(tuple(data)).map(lambda *d: (decode(*d), True)).ignore_errors()
        placeholder = tf.nest.map_structure(lambda spec: tf.zeros([d or 0 for d in spec.shape], spec.dtype),
                                            decoded.element_spec[0])
        failed = tf.data.Dataset.from_tensors((placeholder, False))
        return decoded.concatenate(failed).take(1).map(lambda example, valid: (example, valid, file))

    return one


def guarded_chunks(decode: Callable[..., tuple], one: Callable[..., tf.data.Dataset],
                   size: int) -> Callable[..., tf.data.Dataset]:
    """Like `guarded`, for a chunk of up to `size` records (each component batched): the chunk is decoded as it is,
    and only when one of its records raises is it decoded again one record at a time through `one` (`guarded`),
    which finds and counts the bad ones. Needs decoded examples of a fixed shape (they are batched)."""

    def chunk(*batched: tf.Tensor) -> tf.data.Dataset:
        records = tf.data.Dataset.from_tensors(tuple(batched)).unbatch()
        plain = records.map(lambda *element: (decode(*element[:-1]), tf.constant(True), element[-1]))
        careful = records.flat_map(one)
        return plain.batch(size).ignore_errors().concatenate(careful.batch(size)).take(1).unbatch()

    return chunk


def unreadable_message(error: Exception, counters: Sequence[SkipCounter]) -> str | None:
    """The line for a stream that found nothing readable (None if `error` is something else), naming the files."""
    if UNREADABLE_MARK not in str(error):
        return None
    found = [counter.snapshot() for counter in counters]
    named = "; ".join(counts.describe() for counts in found if counts.skipped)
    return f"no readable training data: {named or 'every record was unreadable'}; check or convert the data again"


def too_many_message(found: Sequence[Counts], max_fraction: float) -> str:
    return (f"more than {max_fraction:.0%} of the records were unreadable in this epoch (--max-skipped-fraction "
            f"{max_fraction:g}): " + "; ".join(counts.describe() for counts in found)
            + "; stopped. Check the named files or convert the data again (python -m chexnet.data.tfrecords)")
