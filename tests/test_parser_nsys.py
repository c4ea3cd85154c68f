"""Nsight Systems SQLite parser (tracer/parsers/nsys.py): damaged exports are one clear error."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from tracer.errors import TraceFormatError
from tracer.parsers import load_trace

KERNELS = (
    "CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INT, end INT, deviceId INT, streamId INT, correlationId INT, "
    "globalPid INT, demangledName INT, shortName INT)"
)


def _export(path: Path, row: str) -> Path:
    con = sqlite3.connect(path)
    con.execute(KERNELS)
    con.execute(f"INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES {row}")
    con.commit()
    con.close()
    return path


@pytest.mark.parametrize(
    ("case", "row"),
    [
        ("null-end", "(10, NULL, 0, 7, 1, 0, 1, 1)"),
        ("null-stream", "(10, 20, 0, NULL, 1, 0, 1, 1)"),
        ("text-start", "('abc', 20, 0, 7, 1, 0, 1, 1)"),
    ],
)
def test_null_or_text_where_nsys_writes_integers_is_a_format_error(tmp_path: Path, case: str, row: str) -> None:
    # these used to escape as a TypeError / ValueError traceback from int() inside pandas (exit 1)
    path = _export(tmp_path / f"{case}.sqlite", row)
    with pytest.raises(TraceFormatError, match=r"damaged Nsight Systems export: unexpected values") as info:
        load_trace(path)
    assert info.value.subject == str(path)


def test_a_sound_row_still_parses(tmp_path: Path) -> None:
    timeline = load_trace(_export(tmp_path / "ok.sqlite", "(10, 20, 0, 7, 1, 0, 1, 1)"))
    assert timeline.events[["start_ns", "end_ns", "device", "stream"]].values.tolist() == [[10, 20, 0, 7]]
