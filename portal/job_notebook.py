"""The notebook behind a job page's "Open in a notebook": the job loaded, its progress, its per-class AUROC
beside the CheXNet paper's and its TensorBoard panel, written once into the job's own directory (as the user)
and opened in their JupyterLab. Plain nbformat 4 JSON: nothing here needs Jupyter installed."""

from __future__ import annotations

import json

NOTEBOOK_NAME = "job-{id}.ipynb"


def _cell(kind: str, source: str, index: int) -> dict:
    cell = {"cell_type": kind, "id": f"job-{index:02d}", "metadata": {}, "source": source.splitlines(True)}
    if kind == "code":
        cell.update(execution_count=None, outputs=[])
    return cell


def job_notebook(job_id: str) -> str:
    """The notebook's JSON for job `job_id` (an id the portal has checked: digits, or local-...)."""
    quoted = json.dumps(job_id)
    cells = [
        ("markdown", f"# Job {job_id}\n\nThis job, loaded from its record. Run the cells from the top; "
                     "`notebook.watch` follows a running job until it ends."),
        ("code", f"from portal import jobs, notebook\n\njob = jobs.get({quoted})\njob.state, job.spec"),
        ("code", "notebook.watch(job)"),
        ("markdown", "## AUROC per class at the best epoch, beside the CheXNet paper"),
        ("code", "notebook.auroc_table(job.metrics())"),
        ("markdown", "## TensorBoard, filtered to this job's run"),
        ("code", "notebook.tensorboard_panel(job)"),
        ("markdown", "To evaluate the checkpoint on the test split, open `notebooks/03-evaluate.ipynb` with "
                     f"`job_id = {quoted}`."),
    ]
    notebook = {
        "cells": [_cell(kind, source, i) for i, (kind, source) in enumerate(cells)],
        "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
                     "language_info": {"name": "python"}},
        "nbformat": 4, "nbformat_minor": 5,
    }
    return json.dumps(notebook, indent=1) + "\n"
