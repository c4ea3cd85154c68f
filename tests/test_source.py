"""Python frames (issue 37): torch.profiler's ``with_stack=True`` rows are kind ``python``, never ops, host busy
time or graph nodes; every format keeps them; each host call's user frame and line.

``tests/data/stacks_cpu.json.gz``: ``tests/data/stacks_cpu.py`` recorded on the CPU with torch 2.13 (two steps
of a Linear's training loop, a Python loop of small ops, a ``.item()``; its warm-up step unrecorded).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import orjson
import pandas as pd
import pyarrow.parquet as pq
import pytest

from tracer.analysis.lanes import host_thread_stats
from tracer.explain import build_graph
from tracer.exporters import export_timeline
from tracer.files.storage import read_timeline_parquet, write_timeline_parquet
from tracer.parsers import load_trace
from tracer.parsers.kineto import parse_kineto_bytes
from tracer.sql.session import Session

DATA = Path(__file__).parent / "data"
STACKS = DATA / "stacks_cpu.json.gz"


@pytest.fixture(scope="module")
def stacks():
    return load_trace(STACKS, cache=False)


def _raw_counts() -> dict[str, int]:
    events = json.loads(gzip.decompress(STACKS.read_bytes()))["traceEvents"]
    cats = pd.Series([e.get("cat") for e in events if e.get("ph") == "X"]).value_counts()
    return {str(k): int(v) for k, v in cats.items()}


def test_python_function_rows_are_python_frames_not_ops(stacks):
    raw = _raw_counts()
    kinds = stacks.events["kind"].value_counts()
    assert kinds["python"] == raw["python_function"] > 0
    assert kinds["cpu_op"] == raw["cpu_op"]
    threads = host_thread_stats(stacks.events)
    assert int(threads["ops"].sum()) == raw["cpu_op"]  # (before issue 37: cpu_op + python_function, at 100% busy)
    ops = stacks.events[stacks.events["kind"] == "cpu_op"]
    frames = stacks.events[stacks.events["kind"] == "python"]
    assert int(threads["busy_ns"].iloc[0]) < int(frames["end_ns"].max() - frames["start_ns"].min())
    assert int(threads["busy_ns"].iloc[0]) <= int((ops["end_ns"] - ops["start_ns"]).sum())


def test_python_frames_are_no_graph_nodes(stacks):
    g = build_graph(stacks)
    assert "python" not in set(g.nodes["kind"].astype(str))
    assert len(g.nodes) > 0


@pytest.mark.parametrize("suffix", [".json", ".sqlite", ".parquet"])
def test_exports_keep_python_frames(stacks, tmp_path, suffix):
    out = export_timeline(stacks, tmp_path / f"t{suffix}").path
    back = load_trace(out, cache=False)
    for t in (stacks, back):
        assert (t.events["kind"] == "python").sum() == (stacks.events["kind"] == "python").sum()
    mine = stacks.events[stacks.events["kind"] == "python"].sort_values(["start_ns", "end_ns", "name"])
    theirs = back.events[back.events["kind"] == "python"].sort_values(["start_ns", "end_ns", "name"])
    assert mine["name"].astype(str).tolist() == theirs["name"].astype(str).tolist()
    assert mine["start_ns"].tolist() == theirs["start_ns"].tolist()


def test_a_schema_3_parquet_files_python_frames_are_read_as_python(stacks, tmp_path):
    # what tracer wrote before issue 37: the frames as cpu_op, schema_version 3
    old = stacks.events.copy()
    old["kind"] = old["kind"].where(old["kind"] != "python", "cpu_op")
    path = tmp_path / "old.parquet"
    write_timeline_parquet(type(stacks)(old, stacks.meta), path)
    table = pq.read_table(path)
    meta = orjson.loads(table.schema.metadata[b"tracer"])
    meta["schema_version"] = 3
    pq.write_table(table.replace_schema_metadata({**table.schema.metadata, b"tracer": orjson.dumps(meta)}), path)
    back = read_timeline_parquet(path)
    assert back.events["kind"].astype(str).tolist() == stacks.events["kind"].astype(str).tolist()
    with Session(path) as s:  # (tracer sql scans the file in place: the same rows)
        got = s.query("SELECT kind, count(*) AS n FROM events GROUP BY kind")
    counts = dict(zip(got["kind"], got["n"], strict=True))
    assert counts["python"] == (stacks.events["kind"] == "python").sum()
    assert counts["cpu_op"] == (stacks.events["kind"] == "cpu_op").sum()


def test_sql_frames_view(stacks):
    with Session(stacks) as s:
        frames = s.query("SELECT file, line, function, name FROM frames WHERE file = 'stacks_cpu.py' "
                         "ORDER BY start_ns")
        builtins = s.query("SELECT count(*) AS n FROM frames WHERE file = '' AND line IS NULL AND function = name")
        total = s.query("SELECT count(*) AS n FROM frames")
    assert frames["function"].tolist()[:3] == ["<module>", "main", "step"]
    assert frames["line"].tolist()[2] == 12  # (a function's frame names its first line: `def step`)
    assert int(builtins["n"].iloc[0]) > 0
    assert int(total["n"].iloc[0]) == (stacks.events["kind"] == "python").sum()


def test_a_python_function_row_is_never_an_op():
    data = orjson.dumps({"traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1.0, "dur": 2.0},
        {"ph": "X", "cat": "python_function", "name": "x.py(3): f", "pid": 1, "tid": 1, "ts": 0.5, "dur": 3.0},
    ]})
    t = parse_kineto_bytes(data)
    assert sorted(t.events["kind"].astype(str)) == ["cpu_op", "python"]
    assert np.array_equal(host_thread_stats(t.events)["ops"].to_numpy(), [1])
