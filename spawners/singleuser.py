"""The JupyterLab server's launchers, started faster, with the server options that shorten its start and keep its
kernels off the network (`SINGLEUSER_ARGS`, both spawners' default `args`): in a Slurm job `dsportal-singleuser`
(setup.py's console script, which the Slurm spawner's `batchspawner_singleuser_cmd` names: batchspawner-singleuser),
in a Kubernetes pod `dsportal-jupyterhub-singleuser` (the Kubernetes spawner's `cmd`: jupyterhub-singleuser)."""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types

# jupyterhub-singleuser options that shorten the server's start and first page, for every server of the portal:
# - jupyter_lsp: scans for ~20 language servers at every start; none is installed on the nodes.
# - the PyPI extension manager: imports an HTTP client and would query pypi.org, unreachable from compute nodes;
#   installing extensions is the image's business, so the read-only manager lists them.
# - news and update checks: the server's news and update handlers would fetch from github.io and pypi.org; these
#   make them answer with nothing. They do not stop JupyterLab's "official Jupyter news?" prompt, which the page
#   shows from the `fetchNews` setting alone: deploy/jupyterlab/dsportal.json sets it (JupyterLab's
#   settings overrides.d, installed by setup.py's data_files and deploy/local/install.sh), for every spawner.
# jupyter-server-proxy (TensorBoard) and the terminals stay. A site changes them with c.PortalSlurmSpawner.args.
SINGLEUSER_FAST_START = (
    "--ServerApp.jpserver_extensions=jupyter_lsp=False",
    "--LabApp.extension_manager=readonly",
    "--LabApp.news_url=None",
    "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
)
# ... and what keeps the server's kernels off the network: a node's loopback is shared by every user's job on it,
# and a kernel's heartbeat channel echoes whatever reaches it. Over ipc, each kernel's channels are Unix sockets
# beside its connection file, in the user's runtime directory (0700): only the user's own processes reach them
# (docs/security.md). Every other channel checks each message's HMAC either way.
SINGLEUSER_PRIVATE = ("--KernelManager.transport=ipc",)
# ... and the portal's own server extension: the lab's way to its GPU figures (portal.lab_gpus, docs/gpus.md).
SINGLEUSER_PORTAL = ("--ServerApp.jpserver_extensions=portal.lab_gpus=True",)
SINGLEUSER_ARGS = (*SINGLEUSER_FAST_START, *SINGLEUSER_PRIVATE, *SINGLEUSER_PORTAL)  # both spawners' default `args`


def defer_iri_syntax_parsers() -> bool:
    """Make `import rfc3987_syntax` cheap in this process: the real module is loaded at its first use.

    jupyter_events (imported by jupyter_server) builds jsonschema's format checker, and jsonschema imports
    rfc3987_syntax for the "iri" formats, which compiles ~35 Earley parsers on import: 0.8 s of the server's
    2.1 s start here (jupyter_server#1559, jsonschema#1428). No Jupyter schema uses those formats; a check that
    does still gets the real module. Returns whether the stand-in was put in place."""
    name = "rfc3987_syntax"
    if name in sys.modules or importlib.util.find_spec(name) is None:
        return False
    real: list[types.ModuleType] = []

    def is_valid_syntax(term: str, value: str) -> bool:
        if not real:
            if sys.modules.get(name) is stand_in:
                del sys.modules[name]
            real.append(importlib.import_module(name))
        return real[0].is_valid_syntax(term, value)

    stand_in = types.ModuleType(name, "rfc3987_syntax, loaded at the first check (spawners.singleuser)")
    stand_in.is_valid_syntax = is_valid_syntax
    sys.modules[name] = stand_in
    return True


def singleuser_main() -> None:
    """The server's launcher in the job (`batchspawner_singleuser_cmd`): batchspawner-singleuser, which reports
    the server's port to the hub and runs jupyterhub-singleuser in this process, after
    `defer_iri_syntax_parsers`."""
    defer_iri_syntax_parsers()
    from batchspawner.singleuser import main

    main()


def jupyterhub_singleuser_main() -> None:
    """The server's launcher in a Kubernetes pod (the Kubernetes spawner's `cmd`): jupyterhub-singleuser, in this
    process, after `defer_iri_syntax_parsers` (bench.kube: the pod's server started ~0.5 s sooner)."""
    defer_iri_syntax_parsers()
    from jupyterhub.singleuser import main

    main()
