"""A host-only trace (a CPU run) is told only what is true of it: no GPU, copy or overlap words in the summary,
and the critical path of the whole trace covers the trace, as the summary's span does."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tracer.cli import app
from tracer.explain import explain
from tracer.parsers import load_trace

#: a CPU run's shape: the scenario's range opens 5 ms before the first operator (Python's own time) and closes
#: 0.5 ms after the last; one thread, with a name longer than a narrow table has room for
RANGE_US = (1000.0, 8500.0)
OPS_US = [(6000.0, 800.0), (6900.0, 300.0), (7300.0, 700.0)]
THREAD = "a host thread whose name is long enough to be cut"


def _cpu_trace(path: Path) -> Path:
    events = [{"ph": "M", "name": "thread_name", "pid": 1, "tid": 7, "args": {"name": THREAD}},
              {"ph": "X", "cat": "user_annotation", "name": "compute-copy/run+copy-blocking", "pid": 1, "tid": 7,
               "ts": RANGE_US[0], "dur": RANGE_US[1] - RANGE_US[0]}]
    events += [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 7, "ts": ts, "dur": dur,
                "args": {}} for ts, dur in OPS_US]
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    return path


@pytest.fixture
def cpu_trace(tmp_path: Path) -> Path:
    return _cpu_trace(tmp_path / "cpu.json")


def test_the_summary_of_a_host_only_trace_speaks_of_no_gpu_and_cuts_names_with_an_ellipsis(cpu_trace: Path) -> None:
    out = CliRunner().invoke(app, ["summary", str(cpu_trace)], env={"COLUMNS": "70"})
    assert out.exit_code == 0, out.output
    text = out.output
    assert "NVTX / record_function ranges" in text and "host ms" in text
    for word in ("GPU busy", "kernels", "memcpys", "CUDA calls", "GPU work they launched", "overlap"):
        assert word not in text, word
    # the thread's name: cut to the width the figures leave, with an ellipsis, on one line
    line = next(x for x in text.splitlines() if "a host thread" in x)
    assert "…" in line and len(line.rstrip()) <= 70
    # a wide terminal has room for the whole name
    wide = CliRunner().invoke(app, ["summary", str(cpu_trace)], env={"COLUMNS": "160"})
    assert THREAD in wide.output


def test_the_critical_path_of_a_host_only_trace_covers_its_span(cpu_trace: Path) -> None:
    t = load_trace(cpu_trace)
    result = explain(t, fix_replays=False)
    path = result.path
    span_ns = int((RANGE_US[1] - RANGE_US[0]) * 1e3)
    assert path.length_ns == span_ns == int(path.pieces["dur_ns"].sum())  # pieces tile the span
    b = dict(zip(path.breakdown()["label"], path.breakdown()["ns"]))
    ops_ns = int(sum(d for _, d in OPS_US) * 1e3)
    assert b["host work"] == ops_ns and b["host gap"] == span_ns - ops_ns
    # the span before the first operator and after the last are pieces of no interval (no row)
    lead, tail = path.pieces.iloc[0], path.pieces.iloc[-1]
    assert (lead["row"], lead["dur_ns"]) == (-1, int((OPS_US[0][0] - RANGE_US[0]) * 1e3))
    assert (tail["row"], tail["dur_ns"]) == (-1, int((RANGE_US[1] - OPS_US[-1][0] - OPS_US[-1][1]) * 1e3))
    # and the command says the same length as the summary's span
    out = CliRunner().invoke(app, ["explain", str(cpu_trace)])
    assert out.exit_code == 0, out.output
    assert f"Critical path of the whole trace: {span_ns / 1e6:.3f} ms" in out.output
