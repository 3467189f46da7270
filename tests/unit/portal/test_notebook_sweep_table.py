"""A notebook's sweep table (portal.notebook.SweepTable) reads as the sweep's page does: the objective that ranks
the trials first and named, parameters to 3 significant digits, AUROC to 3 decimals, one trial marked best (the
page's), and what "best" means said under it."""

from __future__ import annotations

import html
from html.parser import HTMLParser

from portal.notebook import SweepTable
from portal.records.sweep import BEST_BY, OBJECTIVE
from tests.unit.portal.sweeps import finished_view


class Cells(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list[str]] = []

    def handle_starttag(self, tag, attrs):
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self.rows[-1].append("")

    def handle_data(self, data):
        if self.rows and self.rows[-1]:
            self.rows[-1][-1] += data


def test_the_table_ranks_by_the_objective_and_marks_the_pages_best_trial():
    view = finished_view()
    table = SweepTable(view, "sweep 7")
    header = table.header()
    assert header.index(f"{OBJECTIVE} (ranks)") < header.index("best epoch's AUROC")
    cells = Cells()
    cells.feed(table._repr_html_())
    head, *rows = cells.rows
    assert head == header
    by_task = {row[0]: dict(zip(header, row, strict=True)) for row in rows}
    # Trial 1's best epoch (0.973) is the highest AUROC seen, but trial 0's final value ranks first.
    assert [task for task, row in by_task.items() if row[""] == "best"] == [str(view.best.task)] == ["0"]
    assert by_task["0"][f"{OBJECTIVE} (ranks)"] == "0.960" and by_task["1"]["best epoch's AUROC"] == "0.973"
    assert by_task["0"]["lr"] == "0.000682" and by_task["1"]["lr"] == "0.000123"  # not 19 digits
    assert by_task["2"]["state"] == "pruned at epoch 2" and by_task["2"]["epochs run"] == "2 of 4"
    assert BEST_BY in str(table) and BEST_BY in html.unescape(table._repr_html_())
