"""The client libraries the portal loads on first use, not with the portal (MLflow's, which takes a second or two; the
Kubernetes client), loaded whole under one lock before any thread imports from them.

Both packages import themselves in cycles (mlflow -> mlflow.artifacts -> mlflow.tracking -> ...; kubernetes.client
<-> kubernetes.config), and the portal's first use of them is often in a worker thread: a spawn's MLflow account and
its form's limits run off the hub's event loop. Two threads that import such a package for the first time at once,
entering it at different modules, deadlock on Python's module locks or each find the other's half-made module, and
fail with ImportError; the half-made package stays in sys.modules, so every later use in that process fails too.
That took down every spawn of the hub in a pod after two users started servers within a second (2026-12-05), and a
script of four threads importing two of each package's modules fails that way in most tries.

    loaded("kubernetes")          # then `from kubernetes import client` finds it whole
"""

from __future__ import annotations

import importlib
import threading

_LOCK = threading.Lock()


def loaded(*modules: str) -> None:
    """Import `modules` (a package imports its own submodules), one thread at a time: once one call has returned,
    every thread finds them whole in sys.modules. A second call costs a lock and a dictionary lookup."""
    with _LOCK:
        for module in modules:
            importlib.import_module(module)
