"""A job's log as a person wants to read it: the training's own lines, without the frameworks' warnings.

TensorFlow, absl and Keras write pages of warnings that say nothing about the run (a callback "slow compared to the
batch time", oneDNN and CPU-feature notes, cuDNN/cuBLAS factories "already registered", deprecations). The job
page hides them by default and says how many; a switch shows the log whole. Pure: text in, text out.

Hidden (after a Horovod rank prefix such as `[1,0]<stderr>:`, which mpirun puts before every line of a worker):
- Python logging from the frameworks: `WARNING:tensorflow:...`, `INFO:absl:...` (and TensorFlow's
  "Instructions for updating:" with the line after it, which continue a deprecation warning);
- Python warnings, `path.py:12: UserWarning: ...`, with the indented source line Python prints after them;
- TensorFlow's C++ log: `2026-11-22 10:00:00.123456: I tensorflow/...`, `W0000 00:00:1732... file.cc:12] ...`,
  at levels I and W, and at level E only the factory registrations that every GPU start prints.
Never hidden: anything else, and in particular a traceback, an `...Error:` or `...Exception:` line, a fatal (F)
C++ line, and the C++ warnings that say a run is in trouble (out of memory, GPU libraries not loaded).
"""

from __future__ import annotations

import re

RANK_PREFIX = re.compile(r"^(?:\[\d+,\d+\]<std(?:out|err|diag)>:)+")
PY_LOGGING = re.compile(r"^(?:DEBUG|INFO|WARNING):(?:tensorflow|absl|keras|h5py)\b")
PY_WARNING = re.compile(r"^\S.*?:\d+: [A-Z]\w*Warning: ")
# TF's C++ logging (tsl): "<date> <time>: W tensorflow/...cc:12] ..."; absl's: "W0000 00:00:1732.1   12 f.cc:12] ..."
CPP_LOG = re.compile(r"^(?:\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: ([IWEF]) \S+:\d+\]"
                     r"|([IWEF])\d{4} \d\d:\d\d:[\d.]+ +\d+ \S+:\d+\])")
ABSL_PREAMBLE = "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR"
REGISTRATION = re.compile(r"Unable to register cu(?:DNN|FFT|BLAS) factory|computation placer already registered")
# What a person must see even inside a framework's warning: the run is failing or will not use its GPUs.
TROUBLE = re.compile(r"OP_REQUIRES failed|\bOOM\b|out of memory|Cannot dlopen|Traceback \(most recent call last\)"
                     r"|^[\w.]*(?:Error|Exception):", re.IGNORECASE)
INSTRUCTIONS = "Instructions for updating:"


def without_rank(line: str) -> tuple[str, str]:
    """(the Horovod rank prefix, or "", the line after it)."""
    prefix = RANK_PREFIX.match(line)
    return (prefix.group(0), line[prefix.end():]) if prefix else ("", line)


def framework_noise(line: str) -> bool:
    """Whether the line, on its own, is a framework's warning that says nothing about the run."""
    body = without_rank(line)[1].rstrip("\r\n")
    if TROUBLE.search(body):
        return False
    if PY_LOGGING.match(body) or PY_WARNING.match(body) or body == ABSL_PREAMBLE:
        return True
    cpp = CPP_LOG.match(body)
    if cpp is None:
        return False
    level = cpp.group(1) or cpp.group(2)
    return level in "IW" or (level == "E" and REGISTRATION.search(body) is not None)


def _continues(body: str, after: str) -> bool:
    """Whether `body` continues the hidden warning before it on the same rank: the source line Python prints
    after a warning (indented), or TF's "Instructions for updating:" and the line after that."""
    if after == "warning":
        return body[:1] in (" ", "\t") and bool(body.strip())
    if after == "logging":
        return body.rstrip("\r\n") == INSTRUCTIONS
    return after == "instructions" and bool(body.strip()) and not TROUBLE.search(body)


def filter_log(text: str) -> tuple[str, int]:
    """The log without framework noise, and how many lines were left out. Lines keep their endings; a warning's
    continuation is followed per Horovod rank, since two workers' lines interleave."""
    kept, hidden = [], 0
    pending: dict[str, str] = {}  # rank prefix -> what a hidden line there may be continued by
    for line in text.splitlines(keepends=True):
        rank, body = without_rank(line)
        after = pending.pop(rank, "")
        if after and _continues(body, after):
            hidden += 1
            if after == "logging":
                pending[rank] = "instructions"
            continue
        if framework_noise(line):
            hidden += 1
            stripped = body.rstrip("\r\n")
            pending[rank] = "warning" if PY_WARNING.match(stripped) else \
                "logging" if PY_LOGGING.match(stripped) else ""
            continue
        kept.append(line)
    return "".join(kept), hidden
