"""A sortable, paged table whose rows the server looks up by id when one is clicked: the collectives of a job
and the findings of ``tracer explain`` on the timeline page. Only a row's id comes back from the browser, so a
request cannot make the page zoom anywhere the table does not hold.

The table is an AG Grid (``dash-ag-grid``). AG Grid's row ids are strings, so a row's id travels as the decimal
digits of its index on the server (``"0"``, ``"17"``); :func:`row_of_cell` takes back only that spelling."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

import dash_ag_grid as dag

from tracer.errors import UsageError

#: The grid's look, shared by every such table: AG Grid's Quartz theme in the page's font at 13 px, compact
#: rows, and the grey bold header of the page's other tables (evaluated in the browser by dash-ag-grid).
THEME = {"function": "themeQuartz.withParams({fontFamily: 'inherit', fontSize: 13, spacing: 4, "
                     "headerBackgroundColor: '#f0f2f5', headerFontWeight: 'bold'})"}
#: The cells of a table whose long texts wrap: lines as close as the page's text (AG Grid spaces them a row apart).
WRAPPED = {"lineHeight": "1.3", "paddingTop": "3px", "paddingBottom": "3px"}
#: A row id as the grid sends it: the decimal digits of an index, no sign, no leading zero, at most 18 digits.
ROW_ID = re.compile(r"0|[1-9][0-9]{0,17}")


def clickable_table(table_id: str, columns: Sequence[tuple[str, str, str]], rows: list[dict[str, Any]], *,
                    page_size: int, wrap: bool = False,
                    column_style: dict[str, dict[str, str]] | None = None, marked: bool = False) -> Any:
    """An AG Grid of ``rows`` (each with an int ``id``: its row's index on the server) under ``columns`` (id,
    name, type: ``"numeric"`` ones sort as numbers), sorted and paged in the browser; its ``cellClicked`` names
    the row clicked (:func:`row_of_cell`). The table fills its width, a column's share the square root of its
    typical text's length (a median cell, or its header if longer; numbers kept on one line); ``wrap``: long
    texts wrap (else they are cut); ``column_style``: a style for every cell of a column, by its id; ``marked``: one
    row can be shown chosen, by the server (its ``selectedRows``: ``{"ids": [row id]}``), never by a click alone."""
    column_style = column_style or {}
    column_defs = []
    for c, name, t in columns:
        lengths = sorted(len(str(r.get(c, ""))) for r in rows)
        typical = max(len(name), lengths[len(lengths) // 2] if lengths else 0)  # (its header, or a median cell)
        col: dict[str, Any] = {"field": c, "headerName": name, "flex": round(math.sqrt(max(1, typical)))}
        if t == "numeric":  # (numbers, sorted as such; right-aligned, header too; on one line, ~8 px a digit)
            col.update(cellDataType="number", type="numericColumn", wrapText=False, autoHeight=False,
                       minWidth=max(70, 24 + 8 * (lengths[-1] if lengths else 0)))
        else:
            col.update(cellDataType="text", minWidth=100)
        style = {**(WRAPPED if wrap else {}), **column_style.get(c, {})}
        if style:
            col["cellStyle"] = style
        column_defs.append(col)
    return dag.AgGrid(
        id=table_id,
        columnDefs=column_defs,
        rowData=[{**r, "id": str(r["id"])} for r in rows],  # (AG Grid's row ids are strings)
        getRowId="params.data.id",
        defaultColDef={"sortable": True, "resizable": True, "wrapHeaderText": True, "autoHeaderHeight": True,
                       **({"wrapText": True, "autoHeight": True} if wrap else {})},
        dashGridOptions={
            "pagination": True,
            "paginationPageSize": page_size,
            "paginationPageSizeSelector": False,
            "domLayout": "autoHeight",  # as tall as its page of rows: no scrolling inside the table
            "suppressColumnVirtualisation": True,  # (every column drawn: a few, and all on the page's width)
            "theme": THEME,
            # (the server marks the chosen row; a click only sends cellClicked)
            **({"rowSelection": {"mode": "singleRow", "checkboxes": False, "enableClickSelection": False}}
               if marked else {}),
        },
        style={"height": None},  # (domLayout sets it)
    )


def row_of_cell(cell: Any, n: int, *, table: str, thing: str) -> int:
    """The row a clicked cell (the grid's ``cellClicked``) belongs to, by its row id (a string: the row's index
    in decimal digits); :class:`UsageError` ("no such THING in the table") for a cell that names none of the
    ``n`` rows, or names one otherwise (a number, ``"07"``, ``" 7"``)."""
    row_id = cell.get("rowId") if isinstance(cell, dict) else None
    if not isinstance(row_id, str) or not ROW_ID.fullmatch(row_id) or not int(row_id) < n:
        raise UsageError(table, f"no such {thing} in the table; reload the page")
    return int(row_id)
