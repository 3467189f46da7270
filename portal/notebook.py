"""Helpers for the template notebooks, and the TensorBoard every JupyterLab server runs.

    from portal import jobs, notebook
    notebook.submit_form()                   # a form (nodes, GPUs, epochs, model) that submits a training job
    job = jobs.submit({...}); notebook.watch(job)        # state and epochs as the job runs, until it ends
    notebook.tensorboard_panel(job)          # the user's TensorBoard, filtered to this run's charts
    notebook.auroc_table(job.metrics())      # per-class AUROC beside the CheXNet paper's

    python -m portal.notebook install-templates [--source DIR] [--dest DIR]   # copy missing templates to ~/notebooks

`tensorboard_proxy` is a jupyter-server-proxy entry point (setup.py): each server starts TensorBoard over ~/jobs
on first visit of `<server>/tensorboard/`, on a Unix socket only its owner can reach (portal.tensorboard_socket), and
JupyterLab's launcher shows it. `portal_launcher`, another, is only a launcher card that opens the dashboard in a new
browser tab. Everything here runs as the user, in their kernel or their server's batch job; none of it runs in the
hub. The template copy that `install-templates` makes is portal.templates'.
"""

from __future__ import annotations

import argparse
import gzip
import html
import os
import sys
import time
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote

# AurocRow and AurocTable: the notebooks' helpers (portal.notebook.AurocTable), kept with the numbers they show
from portal.records.sweep import BEST_BY, OBJECTIVE
from portal.reference import CHEXNET_PAPER_AUROC, AurocRow, AurocTable, chexnet_paper_mean  # noqa: F401
from portal.service.sparkline import significant
from portal.templates import USER_NOTEBOOKS, install_templates
from portal.tensorboard import TENSORBOARD_PREFIX, panel_url

# How often TensorBoard looks for new points: a new images/sec point is on the panel at most this long after it is
# written. Its loader reads only what is new in each event file; at 2 s TensorBoard's Rust data server used no
# measurable CPU with ~100 runs in the logdir (bench.liveness: 2 s took 1.5 s off the first point's median against
# 5 s). That server listens on loopback TCP, so portal.tensorboard_socket uses the Python loader: not re-measured.
TENSORBOARD_RELOAD_S = 2
# How long jupyter-server-proxy waits for TensorBoard to answer after starting it. It kills a TensorBoard that is
# not ready by then and starts it again at the next visit, so a start slower than this never ends: on a node whose
# CPUs others' training takes, TensorBoard's first start (its TensorFlow import) took over 120 s (a pod weighted a
# quarter of a session's, beside the newcomer's own training: tests/kubernetes/test_listeners_on_kubernetes.py at
# eb9ff00). Its ordinary start takes 5 to 15 s; nothing waits the longer bound unless the start is that slow.
TENSORBOARD_START_TIMEOUT_S = 300
PANEL_HEIGHT = 640
PROXY_NAME = TENSORBOARD_PREFIX.strip("/")  # the entry point's name is the URL path: <server>/tensorboard/
TENSORBOARD_FONTS = b"url(/font-roboto/"  # in TensorBoard's index.html: its fonts, at the site's root
WATCH_POLL_S = 5.0
# JupyterLab's launcher draws an item's own icon only in its Notebook and Console rows (jupyter-server-proxy's
# default category is Notebook for this reason); in any other row a card shows no icon.
LAUNCHER_CATEGORY = "Notebook"
ICONS = Path(__file__).resolve().parent / "icons"
PORTAL_SERVICE_PATH = "services/portal/"  # the dashboard, under the hub's base URL (jupyterhub_config.py's service)


# --- TensorBoard behind jupyter-server-proxy ---

def tensorboard_proxy() -> dict[str, Any]:
    """jupyter-server-proxy's server process: TensorBoard over ~/jobs, served at `<server base URL>tensorboard/`.

    TensorBoard is told its full path (`--path_prefix`) and gets the absolute URL, so its links survive the hub's
    proxy. It listens on no TCP port: 127.0.0.1 is open to every user's job on a shared node. `unix_socket: True`
    has the proxy make a private directory (a mkdtemp, 0700) and pass `<it>/socket` as `{unix_socket}`;
    portal.tensorboard_socket serves TensorBoard there (socket 0600), so the server's proxy, behind the hub's
    login, is its one client."""
    return {
        "command": [sys.executable, "-m", "portal.tensorboard_socket", "--socket", "{unix_socket}",
                    "--logdir", str(Path.home() / "jobs"), "--path_prefix", "{base_url}" + PROXY_NAME,
                    "--reload_interval", str(TENSORBOARD_RELOAD_S)],
        "unix_socket": True,
        "absolute_url": True,
        "rewrite_response": tensorboard_fonts_under_prefix,
        "timeout": TENSORBOARD_START_TIMEOUT_S,
        "launcher_entry": {"enabled": True, "title": "TensorBoard", "category": LAUNCHER_CATEGORY,
                           "icon_path": str(ICONS / "tensorboard.svg")},
        "new_browser_tab": False,
    }


def tensorboard_fonts_under_prefix(response: Any, request: Any) -> None:
    """jupyter-server-proxy's rewrite_response for TensorBoard's page: its index.html names its fonts at the
    site's root (`url(/font-roboto/...)`, whatever --path_prefix says), which under the hub is a 404 (the hub
    redirects /font-roboto/ to /hub/font-roboto/). They are TensorBoard's own files under its path: point the
    page there. TensorBoard gzips the page for a browser that accepts it; the proxy passes it on compressed."""
    content_type = str(response.headers.get("Content-Type", ""))
    if response.code != 200 or not content_type.startswith("text/html"):
        return
    gzipped = str(response.headers.get("Content-Encoding", "")).lower() == "gzip"
    try:
        body = gzip.decompress(response.body) if gzipped else response.body
    except (OSError, EOFError):
        return  # not what TensorBoard sends: passed on as it is
    if TENSORBOARD_FONTS not in body:
        return
    base = quote(request.path.rsplit("/", 1)[0], safe="/")  # <prefix>/tensorboard of <prefix>/tensorboard/[index.html]
    body = body.replace(TENSORBOARD_FONTS, f"url({base}/font-roboto/".encode())
    response.body = gzip.compress(body) if gzipped else body
    if "Content-Length" in response.headers:
        response.headers["Content-Length"] = str(len(response.body))


def portal_path_info(service_prefix: str, base_url: str) -> str | None:
    """The dashboard's URL relative to a server's base URL (`JUPYTERHUB_SERVICE_PREFIX`, e.g. /jhub/user/alice/),
    for a hub at `base_url`: one "../" per path segment between them. None outside a hub (or a prefix that is not
    under the base URL): there is no dashboard to link to."""
    base = "/" + base_url.strip("/") + "/" if base_url.strip("/") else "/"
    if not service_prefix.startswith(base):
        return None
    depth = len([part for part in service_prefix[len(base):].split("/") if part])
    return None if depth == 0 else "../" * depth + PORTAL_SERVICE_PATH


def portal_launcher() -> dict[str, Any]:
    """jupyter-server-proxy's entry for a "Portal" card in JupyterLab's launcher: no command and no port, so it
    proxies nothing and starts nothing; its launcher card opens `path_info`, relative to the server's URL (the
    extension prepends the server's base URL; it has no absolute-link option). A new browser tab, as the
    dashboard refuses to be framed (X-Frame-Options: DENY)."""
    # jupyter-server-proxy warns at every start about an entry with nothing to proxy: here that is the point.
    warnings.filterwarnings("ignore", message=r"Server proxy portal does not have a command", category=UserWarning)
    path_info = portal_path_info(os.environ.get("JUPYTERHUB_SERVICE_PREFIX", ""),
                                 os.environ.get("JUPYTERHUB_BASE_URL", "/"))
    return {
        "command": [],
        "new_browser_tab": True,
        "launcher_entry": {"enabled": path_info is not None, "title": "Portal", "category": LAUNCHER_CATEGORY,
                           "path_info": path_info or PORTAL_SERVICE_PATH, "icon_path": str(ICONS / "portal.svg")},
    }


def _hub_user_and_base(job: Any) -> tuple[str, str]:
    user = os.environ.get("JUPYTERHUB_USER") or job.record.user
    return user, os.environ.get("JUPYTERHUB_BASE_URL", "/")


def tensorboard_panel(job: Any, height: int = PANEL_HEIGHT):
    """The user's TensorBoard in an IFrame, filtered to this job's throughput and AUROC charts."""
    from IPython.display import IFrame

    user, base_url = _hub_user_and_base(job)
    return IFrame(panel_url(user, job.record.run_prefix, base_url), width="100%", height=height)



def auroc_table(metrics: Any, title: str = "AUROC vs the CheXNet paper (Rajpurkar et al. 2017)") -> AurocTable:
    """`metrics` is a RunMetrics (job.metrics()) or a mapping class -> AUROC (an evaluation's auroc.json)."""
    per_class = metrics if isinstance(metrics, Mapping) else metrics.per_class_auroc
    return AurocTable({k: v for k, v in per_class.items() if v is not None}, title)


class SweepTable:
    """A sweep's trials (job.sweep(), portal.records.sweep.SweepView) as the sweep's page shows them: one row per
    task with its parameters (3 significant digits, portal.service.sparkline.significant), state, epochs run, the
    objective that ranks the trials first (portal.records.sweep.OBJECTIVE) and the best epoch's AUROC beside it, the
    best trial (BEST_BY) marked; HTML in a notebook, text elsewhere."""

    def __init__(self, view: Any, title: str = ""):
        self.view, self.title = view, title or "sweep trials"
        self.names = list(view.plan.names)

    def _rows(self) -> list[list[str]]:
        best = self.view.best
        rows = []
        for row in self.view.rows:
            state = row.state.lower() + (f" at epoch {row.pruned_at}" if row.pruned_at is not None else "")
            rows.append([str(row.task), "-" if row.number is None else str(row.number),
                         *(significant(row.params.get(name)) for name in self.names), state,
                         f"{row.epochs_run} of {self.view.plan.epochs}", _auroc(row.value), _auroc(row.best_auroc),
                         "best" if best is not None and row.task == best.task else ""])
        return rows

    def header(self) -> list[str]:
        return ["task", "trial", *self.names, "state", "epochs run", f"{OBJECTIVE} (ranks)", "best epoch's AUROC", ""]

    def note(self) -> str:
        return f"Best means {BEST_BY}."

    def __str__(self) -> str:
        table = [self.header(), *self._rows()]
        widths = [max(len(line[i]) for line in table) for i in range(len(table[0]))]
        return "\n".join([self.title, *("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True))
                                         .rstrip() for line in table), self.note()])

    def _repr_html_(self) -> str:
        head = "".join(f'<th scope="col">{html.escape(name)}</th>' for name in self.header())
        body = "".join("<tr>" + "".join(f"<td>{html.escape(cell)}</td>" for cell in line) + "</tr>"
                       for line in self._rows())
        return (f'<table class="dsportal-sweep"><caption>{html.escape(self.title)}. {html.escape(self.note())}'
                f"</caption><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")

    def __repr__(self) -> str:
        return str(self)


def _auroc(value: Any) -> str:
    """An AUROC as the sweep's page prints it: 3 decimals; none yet: "-"."""
    return "-" if value is None else f"{value:.3f}"


def sweep_table(job: Any) -> SweepTable:
    """The sweep's trials now (`job` a sweep: jobs.submit with a "sweep" field)."""
    return SweepTable(job.sweep(), f"sweep {job.id}: trials, best so far marked")


def sweep_chart(job: Any):
    """Mean AUROC (each trial's last, or where it was pruned) against each searched parameter, one panel each:
    a matplotlib figure."""
    import matplotlib.pyplot as plt

    view = job.sweep()
    names = list(view.plan.names)
    figure, axes = plt.subplots(1, len(names), figsize=(4 * len(names), 3), squeeze=False)
    for axis, param in zip(axes[0], view.plan.space, strict=True):
        points = [(row.params[param.name], row.value) for row in view.rows
                  if param.name in row.params and row.value is not None]
        pruned = [row.pruned_at is not None for row in view.rows if param.name in row.params and row.value is not None]
        xs = [x if isinstance(x, (int, float)) and not isinstance(x, bool) else str(x) for x, _ in points]
        axis.scatter(xs, [y for _, y in points], c=["tab:orange" if p else "tab:blue" for p in pruned])
        if param.log:
            axis.set_xscale("log")
        axis.set_xlabel(param.name)
        axis.set_ylabel("mean AUROC")
    figure.suptitle(f"sweep {job.id}: blue completed, orange pruned")
    figure.tight_layout()
    return figure


# --- submitting and watching jobs ---

def submit_form(defaults: Mapping[str, Any] | None = None, submit=None):
    """An ipywidgets form (nodes, GPUs per node, epochs, model) whose button submits a training job.

    `defaults` fills the form and the fields it does not show (image_size, batch_size, data_dir); the job
    submitted last is `form.job`."""
    import ipywidgets as widgets

    from portal import jobs
    from portal.records.programs import registry

    values = {"template": registry().default.name, "nodes": 1, "gpus_per_node": 1, "epochs": 1, "model": "densenet121",
              **(defaults or {})}
    fields = {
        "nodes": widgets.BoundedIntText(value=values["nodes"], min=1, max=64, description="Nodes"),
        "gpus_per_node": widgets.BoundedIntText(value=values["gpus_per_node"], min=0, max=16,
                                                description="GPUs/node"),
        "epochs": widgets.BoundedIntText(value=values["epochs"], min=1, max=1000, description="Epochs"),
        "model": widgets.Dropdown(options=list(registry().get(values["template"]).models), value=values["model"],
                                  description="Model"),
    }
    button = widgets.Button(description="Submit training", button_style="primary")
    message = widgets.HTML()
    form = widgets.VBox([*fields.values(), button, message])
    form.job = None

    def on_click(_button) -> None:
        spec = {**values, **{name: field.value for name, field in fields.items()}}
        try:
            form.job = (submit or jobs.submit)(spec)
        except ValueError as err:  # JobSpecError names the field and what is allowed
            message.value = f'<span style="color:#b00">{html.escape(str(err))}</span>'
            return
        message.value = f"Submitted job <b>{html.escape(form.job.id)}</b>; watch it with <code>watch(form.job)</code>."
        if getattr(form.job, "warning", ""):
            message.value += f'<br><span style="color:#8a5300">{html.escape(form.job.warning)}</span>'

    button.on_click(on_click)
    form.fields, form.button, form.message = fields, button, message
    return form


def _in_widget_frontend() -> bool:
    """True in a live kernel with a front end (JupyterLab); False headless (nbclient, papermill) and in scripts."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and "IPKernelApp" in shell.config and not os.environ.get("PAPERMILL_EXECUTION")


def watch(job: Any, timeout: float | None = None, poll: float = WATCH_POLL_S) -> str:
    """Follow a job until it ends: its state and epochs done, as a progress bar in JupyterLab and as printed lines
    (one per change) everywhere, so a headless run leaves a record. Returns the final state. While the scheduler
    does not answer (slurmctld or the API server restarting), it says so once and asks again: the job runs on
    (portal.scheduler.asker.Asker, which also rides through a restarted API server's refusals for a while)."""
    from portal.jobs import Asker
    from portal.records.record import ENDED_STATES

    bar = label = None
    if _in_widget_frontend():
        import ipywidgets as widgets
        from IPython.display import display

        plan = getattr(job, "plan", None)
        bar = widgets.IntProgress(value=0, min=0, max=plan.trials if plan is not None else job.spec.epochs,
                                  description="trials done" if plan is not None else "epochs")
        label = widgets.Label()
        display(widgets.HBox([bar, label]))

    def look() -> tuple[str, int, str]:
        state = job.state
        if getattr(job, "plan", None) is not None:  # a sweep: its trials by state
            view = job.sweep()
            counts = ", ".join(f"{n} {name.lower()}" for name, n in sorted(view.counts().items()))
            return (state, sum(row.state not in ("PENDING", "RUNNING") for row in view.rows),
                    f"sweep {job.id}: {state}; trials: {counts}")
        epochs = job.metrics().epochs_done if state != "PENDING" else 0
        return state, epochs, f"job {job.id}: {state}, epoch {epochs}/{job.spec.epochs}"

    deadline = None if timeout is None else time.monotonic() + timeout
    started, last, asker, epochs = time.monotonic(), None, Asker(), 0
    while True:
        answer, why = asker.ask(look)
        if why is None:
            state, epochs, line = answer
        else:
            state, line = "UNKNOWN", f"job {job.id}: {why}"
        if line != last:
            print(f"[{time.monotonic() - started:6.0f} s] {line}", flush=True)
            last = line
        if bar is not None:
            bar.value, label.value = min(epochs, bar.max), line
        if state in ENDED_STATES:
            return state
        if deadline is not None and time.monotonic() >= deadline:
            raise TimeoutError(f"job {job.id} is still {state} after {timeout} s")
        time.sleep(poll)


# --- data and checkpoints the notebooks read ---

def demo_dataset(layout: bool = True) -> Path:
    """The demo data set: its ChestX-ray14 layout (images and CSV) or, with layout=False, its TFRecords."""
    from portal.config import load
    from portal.jobs.demo_data import LAYOUT_NAME

    tfrecords = load().default_data_path
    return tfrecords.parent / LAYOUT_NAME if layout else tfrecords


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m portal.notebook", description="Notebook helpers.")
    commands = parser.add_subparsers(dest="command", required=True)
    install = commands.add_parser("install-templates", help="copy missing template notebooks to ~/notebooks")
    install.add_argument("--source", help="the templates (default: the installed ones)")
    install.add_argument("--dest", default=USER_NOTEBOOKS, help="where they go (default: %(default)s)")
    args = parser.parse_args(argv)
    try:
        copied = install_templates(args.source, args.dest)
    except OSError as err:
        print(f"install-templates: {err}", file=sys.stderr)
        return 1
    print(f"install-templates: copied {len(copied)} into {Path(args.dest).expanduser()}"
          + (f": {', '.join(copied)}" if copied else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
