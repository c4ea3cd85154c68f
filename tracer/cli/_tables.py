"""How the commands fit a Rich table to the terminal: the width a table needs, long names wrapped at their
separators. Shared by the commands that print tables (summary, diff, explain)."""

from __future__ import annotations

from typing import Any


def wrap_name(name: str, width: int) -> str:
    """``name`` in lines of at most ``width`` characters, broken after ``/ - _ . + :`` where it can be."""
    lines: list[str] = []
    while len(name) > width:
        cut = max(name.rfind(sep, 0, width) for sep in "/-_.+: ") + 1
        if cut <= width // 3:  # no separator far enough in: cut at the width
            cut = width
        lines.append(name[:cut].rstrip())
        name = name[cut:].lstrip()
    lines.append(name)
    return "\n".join(lines)


def table_width(table: Any, rows: list[list[str]]) -> int:
    """The width ``table``'s columns (headers included) and ``rows`` need, borders and padding included."""
    from copy import deepcopy

    from rich.console import Console

    probe = deepcopy(table)
    for row in rows:
        probe.add_row(*row)
    console = Console(width=10_000)
    return console.measure(probe).maximum
