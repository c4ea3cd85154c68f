"""A sortable, paged table whose rows the server looks up by id when one is clicked: the collectives of a job
and the findings of ``tracer explain`` on the timeline page. Only a row's id comes back from the browser, so a
request cannot make the page zoom anywhere the table does not hold."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dash import dash_table

from tracer.errors import UsageError

#: The cells' look, shared by every such table (a table may add to it).
CELL_STYLE = {"fontFamily": "inherit", "fontSize": "13px", "padding": "3px 8px"}
HEADER_STYLE = {"backgroundColor": "#f0f2f5", "fontWeight": "bold"}


def clickable_table(table_id: str, columns: Sequence[tuple[str, str, str]], rows: list[dict[str, Any]], *,
                    page_size: int, cell_style: dict[str, str] | None = None,
                    conditional: list[dict[str, Any]] | None = None) -> Any:
    """A DataTable of ``rows`` (each with an ``id``: its row's index on the server) under ``columns`` (id, name,
    type), sorted and paged in the browser; its ``active_cell`` names the row clicked."""
    return dash_table.DataTable(  # type: ignore[attr-defined]  # (generated: no stub names it)
        id=table_id,
        columns=[{"id": c, "name": name, "type": t} for c, name, t in columns],
        data=rows,
        sort_action="native",
        page_action="native",
        page_size=page_size,
        cell_selectable=True,
        style_table={"overflowX": "auto"},
        style_cell={**CELL_STYLE, **(cell_style or {})},
        style_header=HEADER_STYLE,
        style_data_conditional=conditional or [],
    )


def row_of_cell(cell: Any, n: int, *, table: str, thing: str) -> int:
    """The row a clicked cell (DataTable's ``active_cell``) belongs to, by its row id; :class:`UsageError`
    ("no such THING in the table") for a cell that names none of the ``n`` rows."""
    row_id = cell.get("row_id") if isinstance(cell, dict) else None
    if isinstance(row_id, bool) or not isinstance(row_id, int) or not 0 <= row_id < n:
        raise UsageError(table, f"no such {thing} in the table; reload the page")
    return row_id
