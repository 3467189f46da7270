"""PLACEHOLDER until the charts' own module lands (issue 52, item 1): overlaid per-epoch curves of several runs.
The real one draws an inline SVG with axes, ticks, units and a legend; this one, of the same signature, shows the
same points as a small table so that the experiments page works meanwhile."""

from __future__ import annotations

from collections.abc import Sequence

from markupsafe import Markup, escape

from portal.service.sparkline import significant


def curves(series: Sequence[tuple[str, Sequence[tuple[int, float]]]], *, title: str, y_label: str, unit: str = "",
           log_y: bool = False) -> Markup:
    """`series`: (run label, [(epoch, value), ...]) per run. A table of the values by epoch (placeholder)."""
    epochs = sorted({epoch for _, points in series for epoch, _ in points})
    head = "".join(f'<th scope="col">{escape(label)}</th>' for label, _ in series)
    rows = []
    for epoch in epochs:
        cells = "".join(f"<td>{escape(significant(dict(points).get(epoch)) if epoch in dict(points) else 'none')}"
                        "</td>" for _, points in series)
        rows.append(f'<tr><th scope="row">{epoch}</th>{cells}</tr>')
    unit_text = f" ({escape(unit)})" if unit else ""
    scale = " (log scale)" if log_y else ""
    return Markup(f'<table class="table table-sm curves"><caption>{escape(title)}: {escape(y_label)}{unit_text}'
                  f'{scale} by epoch</caption><thead><tr><th scope="col">Epoch</th>{head}</tr></thead>'
                  f'<tbody>{"".join(rows)}</tbody></table>')
