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
    # and its findings speak of no copy and no GPU
    assert "Findings: none (this trace has host work only" in out.output
    assert "copy" not in out.output.lower() and "GPU idle" not in out.output and "kernel" not in out.output


def _variant_trace(path: Path, variant: str, ops_us: list[tuple[float, float, int]]) -> Path:
    """A CPU compute-copy run of ``variant``: its range named after it, ops on threads (ts, dur, tid)."""
    events = [{"ph": "X", "cat": "user_annotation", "name": f"compute-copy/run+copy-{variant}", "pid": 1, "tid": 7,
               "ts": 1000.0, "dur": 9000.0}]
    events += [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": tid, "ts": ts, "dur": dur,
                "args": {}} for ts, dur, tid in ops_us]
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    return path


def test_a_diff_of_two_cpu_variants_adds_up_to_the_span_change_and_matches_their_ranges(tmp_path: Path) -> None:
    from tracer.analysis.diff import VARIANT, diff_timelines
    from tracer.analysis.states import span_states

    a = load_trace(_variant_trace(tmp_path / "a.json", "blocking", [(2000.0, 3000.0, 7), (6000.0, 1000.0, 7)]))
    b = load_trace(_variant_trace(tmp_path / "b.json", "side-stream",
                                  [(2000.0, 3000.0, 7), (3000.0, 1000.0, 8), (9500.0, 1500.0, 7)]))
    a.meta.extra["run"] = {"scenario": "compute-copy", "variant": "blocking"}
    b.meta.extra["run"] = {"scenario": "compute-copy", "variant": "side-stream"}
    d = diff_timelines(a, b)
    # the states add up to each span, so their changes add up to the span's change
    for t in (a, b):
        ev = t.events
        assert sum(span_states(ev).values()) == int(ev["end_ns"].max() - ev["start_ns"].min())
    assert d.span_diff_ns == 1_000_000 == sum(line.delta_ns for line in d.states)
    by = {line.what: (line.a_ns, line.b_ns) for line in d.states}
    assert by["host ops on 2+ threads, no GPU work"] == (0, 1_000_000)  # 3.0–4.0 ms: two threads at once
    assert by["host ops on one thread, no GPU work"] == (4_000_000, 3_500_000)
    assert by["nothing traced"] == (5_000_000, 5_500_000)
    # the scenario's range, named after each run's variant, is one range (of the same length here), not one removed and one added
    ranges = [item for item in d.items if item.kind == "range"]
    assert [(r.name, r.change) for r in ranges] == [(f"compute-copy/run+copy-{VARIANT}", "unchanged")]
    assert any("variant" in note for note in d.notes)
    # and the command says so, with no GPU row for two host-only traces
    out = CliRunner().invoke(app, ["diff", str(tmp_path / "a.json"), str(tmp_path / "b.json")],
                             env={"COLUMNS": "200"})
    assert out.exit_code == 0, out.output
    assert "GPU work span" not in out.output and "the sum of these" in out.output


def test_the_path_of_a_host_only_trace_goes_from_thread_to_thread(tmp_path: Path) -> None:
    # two lanes as the CPU scenarios run them: thread 8's work, then (handed over through a future, which the
    # trace does not show) thread 9's; the path is both threads' ops and the gaps between, not thread 9's alone
    events = [{"ph": "X", "cat": "user_annotation", "name": "phase", "pid": 1, "tid": 7, "ts": 0.0, "dur": 10000.0}]
    events += [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": tid, "ts": ts, "dur": 1000.0,
                "args": {}} for tid, ts in ((8, 1000.0), (8, 2500.0), (9, 6000.0), (9, 8000.0))]
    path_file = tmp_path / "threads.json"
    path_file.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    path = explain(load_trace(path_file), fix_replays=False).path
    b = dict(zip(path.breakdown()["label"], path.breakdown()["ns"]))
    assert path.length_ns == 10_000_000 and b["host work"] == 4_000_000 and b["host gap"] == 6_000_000
    assert set(path.pieces.loc[path.pieces["row"] >= 0, "name"]) == {"aten::mm"}
    assert (path.pieces["label"] == "host work").sum() == 4  # every op of both threads
