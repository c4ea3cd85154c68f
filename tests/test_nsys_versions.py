"""Nsight Systems exports of other versions: the schema is read from the file, and names are never invented."""

from __future__ import annotations

import gzip
import sqlite3
from pathlib import Path

from tracer.analysis.summary import summarize
from tracer.parsers import load_trace

OLD = Path(__file__).parent / "data" / "external" / "extrap_ex-gpu.s1000.sqlite.gz"


def _union_ns(rows: list[tuple[int, int]]) -> int:
    """Length of the union of [start, end) intervals, by hand (independent of tracer's interval code)."""
    total = 0
    reach: tuple[int, int] | None = None  # the stretch covered so far: (start, end)
    for s, e in sorted(rows):
        if reach is None or s > reach[1]:
            if reach is not None:
                total += reach[1] - reach[0]
            reach = (s, e)
        else:
            reach = (reach[0], max(reach[1], e))
    return total + (reach[1] - reach[0] if reach is not None else 0)


def test_an_older_export_reads_with_counts_and_figures_from_its_own_rows(tmp_path: Path) -> None:
    raw = tmp_path / "old.sqlite"
    raw.write_bytes(gzip.decompress(OLD.read_bytes()))
    con = sqlite3.connect(raw)
    kernels = con.execute("SELECT deviceId, start, end FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchall()
    names = dict(con.execute("SELECT deviceId, name FROM TARGET_INFO_GPU").fetchall())
    con.close()
    assert "id" not in {r[1] for r in sqlite3.connect(raw).execute("PRAGMA table_info(TARGET_INFO_GPU)")}

    timeline = load_trace(OLD)  # the .gz, as a user passes it
    summary = summarize(timeline)
    for dev in sorted({d for d, _, _ in kernels}):
        rows = [(s, e) for d, s, e in kernels if d == dev]
        fig = summary["devices"][str(dev)]
        assert fig["kernels"] == len(rows)
        assert fig["compute_ns"] == _union_ns(rows)
    assert timeline.meta.gpu_names == names
    assert all(names.values())


def test_an_export_of_a_trace_without_gpu_names_invents_none(tmp_path: Path, data_dir: Path) -> None:
    from tracer.exporters import export_timeline

    timeline = load_trace(data_dir / "two_streams.json.gz")
    timeline.meta.gpu_names = {}
    out = tmp_path / "t.sqlite"
    export_timeline(timeline, out)
    back = load_trace(out)
    assert back.meta.gpu_names == {}
    assert summarize(back)["devices"] == summarize(timeline)["devices"]
