"""tracer.analysis.launches: how far the host ran ahead of each GPU, against an independent computation.

The figures on real H200 traces are recomputed here from the JSON itself (stdlib json with exact decimals,
runtime calls paired with GPU rows by args.correlation, the queue counted by brute force), not from the
timeline; a hand-made trace pins the rules a real one may not exercise (a call queuing several kernels, a row
that ends before its call returns, work without a call).
"""

from __future__ import annotations

import decimal
import gzip
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.conftest import DATA, cli_main
from tracer.analysis.launches import launch_table
from tracer.parsers import load_trace

_CALLS = ("cuda_runtime", "cuda_driver")
_WORK = ("kernel", "gpu_memcpy", "gpu_memset")


def _ns(us: decimal.Decimal) -> int:
    """µs → ns, rounded half to even (as the parser rounds a point in time)."""
    return int((us * 1000).to_integral_value(rounding=decimal.ROUND_HALF_EVEN))


def _lower_pct(values: list[int], q: int) -> int:
    s = sorted(values)
    return s[int(q / 100 * (len(s) - 1))]  # numpy's "lower": the neighbour below the exact rank


def _expected(doc: dict[str, Any]) -> dict[str, Any]:
    """The launch figures of a one-GPU Kineto document, computed from its events alone."""
    calls, work = {}, []
    for e in doc["traceEvents"]:
        if e.get("ph") != "X" or "correlation" not in (e.get("args") or {}):
            continue
        ts, dur = decimal.Decimal(e["ts"]), decimal.Decimal(e.get("dur", 0))
        row = {"start": _ns(ts), "end": _ns(ts + dur), "corr": e["args"]["correlation"], "cat": e["cat"]}
        if e["cat"] in _CALLS:
            calls[row["corr"]] = row
        elif e["cat"] in _WORK:
            work.append({**row, "stream": e["args"]["stream"]})
    linked = [w for w in work if w["corr"] in calls]
    by_call: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for w in linked:
        by_call[w["corr"]].append(w)
    delays, took, kernels, short, early = [], [], 0, 0, 0
    for corr, rows in by_call.items():
        c, first = calls[corr], min(rows, key=lambda w: w["start"])
        delays.append(max(0, first["start"] - c["end"]))
        early += first["start"] < c["end"]
        took.append(c["end"] - c["start"])
        if len(rows) == 1 and first["cat"] == "kernel":
            kernels += 1
            short += (first["end"] - first["start"]) < (c["end"] - c["start"])
    per_call: dict[int, int] = defaultdict(int)  # rows ahead of a call, summed over the streams it queued on
    for stream in {w["stream"] for w in linked}:
        rows = [w for w in linked if w["stream"] == stream]
        q = np.array([calls[w["corr"]]["end"] for w in rows])
        e = np.array([w["end"] for w in rows])
        corrs = np.array([w["corr"] for w in rows])
        for cid in sorted(set(corrs.tolist())):
            t = calls[cid]["end"]
            per_call[cid] += int(((q <= t) & (t < e) & (corrs != cid)).sum())
    ahead = list(per_call.values())
    return {"launches": len(by_call), "unlinked": len(work) - len(linked), "call_p50_ns": _lower_pct(took, 50),
            "delay_p50_ns": _lower_pct(delays, 50), "delay_p95_ns": _lower_pct(delays, 95),
            "delay_max_ns": max(delays), "started_early": early, "kernels": kernels, "short_kernels": short,
            "queue_mean": round(sum(ahead) / len(ahead), 2), "queue_max": max(ahead),
            "empty_at_launch": sum(a == 0 for a in ahead)}


@pytest.mark.slow
@pytest.mark.parametrize("name", ["mlp_train_200.json.gz", "copy_side_stream.json.gz", "two_streams.json.gz",
                                  "graphs_kineto.json.gz"])
def test_launch_figures_equal_an_independent_computation_on_real_h200_traces(name: str) -> None:
    doc = json.loads(gzip.decompress((DATA / name).read_bytes()), parse_float=decimal.Decimal)
    table = launch_table(load_trace(DATA / name, cache=False).events)
    assert len(table) == 1
    got = table.iloc[0].to_dict()
    want = _expected(doc)
    assert {k: got[k] for k in want} == want
    assert want["launches"] > 0


def _call(name: str, ts: float, dur: float, corr: int) -> dict[str, Any]:
    return {"ph": "X", "cat": "cuda_runtime", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur,
            "args": {"correlation": corr}}


def _kernel(name: str, ts: float, dur: float, stream: int, corr: int | None) -> dict[str, Any]:
    args: dict[str, Any] = {"device": 0, "stream": stream}
    if corr is not None:
        args["correlation"] = corr
    return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": stream, "ts": ts, "dur": dur, "args": args}


def test_a_graph_launch_counts_once_its_own_rows_are_not_ahead_of_it_and_a_skewed_row_is_not_negative(
        tmp_path: Path) -> None:
    events = [
        _call("cudaLaunchKernel", 0, 10, 1), _kernel("long", 12, 100, 7, 1),  # delay 2 µs, queue empty
        _call("cudaGraphLaunch", 20, 5, 2),  # three kernels on stream 7 behind "long": one launch, delay 87 µs
        _kernel("g1", 112, 1, 7, 2), _kernel("g2", 113, 1, 7, 2), _kernel("g3", 114, 1, 7, 2),
        _call("cudaLaunchKernel", 200, 10, 3), _kernel("skewed", 205, 2, 7, 3),  # ends before its call returns
        _kernel("orphan", 300, 1, 7, None),  # no call in the trace
    ]
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": events}))
    row = launch_table(load_trace(p, cache=False).events).iloc[0].to_dict()
    assert row["launches"] == 3 and row["unlinked"] == 1
    # delays (ns): 12-10 = 2 µs; 112-25 = 87 µs; 205-210 < 0: 0 (the GPU began before the call returned)
    assert (row["delay_p50_ns"], row["delay_max_ns"], row["started_early"]) == (2_000, 87_000, 1)
    # ahead at each call's return: none; "long" (its own three kernels left out); none ("skewed" already over)
    assert (row["queue_max"], row["empty_at_launch"], row["queue_mean"]) == (1, 2, 0.33)
    assert (row["kernels"], row["short_kernels"]) == (2, 1)  # "long" and "skewed" ran one per call


@pytest.mark.slow
def test_summary_shows_and_writes_the_launch_figures() -> None:
    proc = cli_main("summary", str(DATA / "mlp_train_200.json.gz"))
    assert proc.returncode == 0, proc.stderr
    assert "Launches: how far the host ran ahead of each GPU" in proc.stdout
    doc = json.loads(cli_main("summary", "--json", str(DATA / "mlp_train_200.json.gz")).stdout)
    assert doc["launches"]["0"]["launches"] == 3600 and doc["launches"]["0"]["unlinked"] == 0


def test_a_graph_launch_over_several_streams_is_one_launch_in_the_queue_figures(tmp_path: Path) -> None:
    # (the review's case: empty_at_launch counted (call, stream) pairs, so "empty queue" could read 200%)
    events = [_call("cudaLaunchKernel", 0, 5, 1), _kernel("long", 6, 94, 8, 1),  # stream 8 busy until 100 µs
              _call("cudaGraphLaunch", 10, 5, 2),  # returns at 15 µs; queues on streams 7, 8 and 9
              _kernel("a", 20, 1, 7, 2), _kernel("b", 100, 1, 8, 2), _kernel("c", 20, 1, 9, 2),
              _call("cudaLaunchKernel", 30, 5, 3), _kernel("d", 40, 1, 7, 3)]
    p = tmp_path / "g.json"
    p.write_text(json.dumps({"traceEvents": events}))
    row = launch_table(load_trace(p, cache=False).events).iloc[0].to_dict()
    # ahead of each launch: none; "long" on stream 8 (its other streams empty), summed: 1; none ("a" is over)
    assert (row["launches"], row["empty_at_launch"], row["queue_max"], row["queue_mean"]) == (3, 2, 1, 0.33)
