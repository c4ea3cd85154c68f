"""Every real Kineto trace users bring is read, and read exactly — never silently wrong.

Real traces of others (tests/data/external/, sources in SOURCES.md there) and four hand-written
reproductions (tests/data/external/repro/): each file's kernel / memcpy / memset counts and its per-GPU compute,
copy and overlap are checked against an independent computation here — the standard library's ``json`` with
``Decimal`` on the ``ts`` / ``dur`` text and a plain union of intervals — and against figures written out.
Then the tolerant decoding one quirk at a time: string args, times as text, B/E slices, GPU rows that cannot be
placed, empty traces, and what `tracer summary` says about the events it had to leave out.
"""

from __future__ import annotations

import gzip
import json
import random
from decimal import ROUND_HALF_EVEN, Decimal
from fractions import Fraction
from pathlib import Path

import msgspec
import orjson
import pandas as pd
import pytest

from tests.conftest import cli_main
from tracer.analysis.lanes import lane_stats
from tracer.analysis.overlap import device_overlap
from tracer.parsers import load_trace
from tracer.parsers.kineto import parse_kineto_bytes
from tracer.parsers.kineto_scan import _PAD_RAW, _RAW_LIST_ENCODER, _fixed_point, _kineto_ns, copy_kind_from_name

EXTERNAL = Path(__file__).parent / "data" / "external"
REPRO = EXTERNAL / "repro"
DATA = Path(__file__).parent / "data"


# --- the independent reference: stdlib json + Decimal, no tracer code ------------------------------------

_RAW_KIND = {"kernel": "kernel", "gpu_memcpy": "memcpy", "memcpy": "memcpy", "gpu_memset": "memset", "memset": "memset"}


def _ns(us: Decimal) -> int:
    """µs → ns, halves to even (only the HTA-style traces with more than three decimals ever round)."""
    return int((us * 1000).to_integral_value(rounding=ROUND_HALF_EVEN))


def _union_ns(intervals: list[tuple[int, int]]) -> int:
    total, cur_s, cur_e = 0, 0, None
    for s, e in sorted(intervals):
        if cur_e is None or s > cur_e:
            total += 0 if cur_e is None else cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    return total + (0 if cur_e is None else cur_e - cur_s)


def _is_comm_kernel(e: dict) -> bool:
    """NCCL / RCCL's kernels, by the trace's collective metadata or by name (compute is every other kernel)."""
    name = str(e.get("name", ""))
    return "Collective name" in e.get("args", {}) or name.lstrip("_").startswith(("nccl", "rccl"))


def raw_figures(path: Path) -> dict[int, tuple[int, int, int, int, int, int]]:
    """device → (kernels, memcpys, memsets, compute_ns, copy_ns, overlap_ns) straight from the JSON text.

    Events are counted by category as written (PyTorch 1.8 capitalised them); a GPU row's device is
    args.device, else its pid; each interval is [ts, ts + dur] in exact decimals, rounded to ns at both ends.
    Compute is the kernels that are not communication (NCCL / RCCL); the kernel count is all of them.
    """
    data = path.read_bytes()
    doc = json.loads(gzip.decompress(data) if path.suffix == ".gz" else data, parse_float=Decimal)
    rows: dict[int, dict[str, list[tuple[int, int]]]] = {}
    for e in doc["traceEvents"] if isinstance(doc, dict) else doc:
        kind = _RAW_KIND.get(str(e.get("cat", "")).lower())
        if e.get("ph") != "X" or kind is None:
            continue
        ts, dur = Decimal(e["ts"]), Decimal(e.get("dur", 0))
        assert dur >= 0
        device = int(e.get("args", {}).get("device", e.get("pid")))
        per = rows.setdefault(device, {"kernel": [], "comm": [], "memcpy": [], "memset": []})
        per["comm" if kind == "kernel" and _is_comm_kernel(e) else kind].append((_ns(ts), _ns(ts + dur)))
    out = {}
    for device, r in sorted(rows.items()):
        compute, copy = _union_ns(r["kernel"]), _union_ns(r["memcpy"])
        overlap = compute + copy - _union_ns(r["kernel"] + r["memcpy"])
        kernels = len(r["kernel"]) + len(r["comm"])
        out[device] = (kernels, len(r["memcpy"]), len(r["memset"]), compute, copy, overlap)
    return out


def parsed_figures(path: Path) -> dict[int, tuple[int, int, int, int, int, int]]:
    tl = load_trace(path, cache=False)
    return {
        d.device: (d.kernels, d.memcpys, d.memsets, d.compute_ns, d.copy_ns, d.overlap_ns)
        for d in device_overlap(tl.events)
    }


#: the same figures written out, so that the reference itself is pinned down too (compute without NCCL/RCCL
#: kernels since schema 3: the four traces with communication moved then)
EXPECTED = {
    "HTA_critpath_alexnet_benchmark_result_2869224_1695835535_trace.json.gz": {0: (79, 16, 3, 10630000, 55503000, 0)},
    "HTA_cuda_event_sync_multi_stream_event_sync_trace.json.gz": {0: (3, 0, 3, 369000, 0, 0)},
    "HTA_mi250_minitoy_train_ROCm6_2_kineto.json.gz": {2: (14, 2, 0, 110881, 38161, 0)},
    "HTA_nccl_parser_config_nccl_data.json.gz": {0: (2700, 960, 114, 115655847, 2262781, 0)},
    "HTA_trace_filter_sampled_rank-0.json.gz": {0: (1154, 40, 10, 210320000, 1297000, 22000)},
    "HTA_trace_filter_sampled_rank-1.json.gz": {1: (1104, 40, 10, 271973000, 16473000, 7922000)},
    "HTA_triton_example.json.gz": {0: (1, 0, 0, 1760, 0, 0)},
    "HTA_with_gpu_user_annotation_step_based_trace_2543932.json.gz": {0: (130, 10, 0, 290000, 1000, 0)},
    "TraceLens_mi300_resnet_act_checkpoint.json.gz": {2: (2995, 550, 108, 25739303, 2538596, 0)},
    "TraceLens_vllm_decode_full_graph_execution.json.gz": {2: (425, 9, 0, 10674517, 43191, 0)},
    "kineto_resnet50_num_workers_0_worker0.pt.trace.json.gz": {0: (9564, 12, 439, 640354000, 12734000, 0)},
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_external_trace_matches_its_raw_events(name):
    path = EXTERNAL / name
    raw = raw_figures(path)
    assert raw == EXPECTED[name]
    assert parsed_figures(path) == raw


def test_external_traces_are_all_covered():
    kineto = {p.name for p in EXTERNAL.glob("*.json.gz")}
    assert kineto == set(EXPECTED)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["two_streams.json.gz", "copy_nonblocking_same_stream.json.gz",
                                  "copy_side_stream.json.gz", "mlp_train_200.json.gz"])
def test_h200_fixtures_match_exact_decimals(name):
    """The reference figures of tests/data/FIXTURES.md are the exact decimal ones (not float sums)."""
    assert parsed_figures(DATA / name) == raw_figures(DATA / name)


# --- the four reproductions ---------------------------------------------------------------------------------


def test_epoch_microseconds_are_exact():
    """ts 1712195495505582.988 µs: a float64 holds it to 0.25 µs; compute used to come out as 5,000 ns."""
    tl = load_trace(REPRO / "epoch_us.json", cache=False)
    (dev,) = device_overlap(tl.events)
    assert (dev.compute_ns, dev.copy_ns, dev.overlap_ns) == (4928, 2752, 0)
    kernel = tl.events[tl.events["kind"] == "kernel"].iloc[0]
    assert (kernel["start_ns"], kernel["end_ns"]) == (1712195495505582988, 1712195495505587916)


def test_rocm_string_args_are_read_not_fatal():
    tl = load_trace(REPRO / "rocm_str_args.json", cache=False)
    (dev,) = device_overlap(tl.events)
    assert (dev.device, dev.kernels, dev.compute_ns) == (2, 1, 10000)
    call = tl.events[tl.events["kind"] == "runtime"].iloc[0]
    assert call["name"] == "hipMemcpyWithStream" and call["bytes"] == 2  # "bytes": "2"
    assert "skipped" not in tl.meta.extra


def test_pytorch_1_8_capitalised_categories():
    tl = load_trace(REPRO / "old_kineto_caps.json", cache=False)
    (dev,) = device_overlap(tl.events)
    assert (dev.device, dev.kernels, dev.memcpys, dev.compute_ns, dev.copy_ns) == (0, 1, 1, 10000, 5000)
    gpu = tl.events[tl.events["device"] == 0]
    assert gpu["stream"].tolist() == [7, 7] and gpu["tid"].tolist() == [7, 7]  # tid "stream 7"
    assert gpu["copy_kind"].astype(str).tolist() == ["", "HtoD"]


def test_lane_gap_is_kept():
    """Two kernels 101 ns apart on one lane: busy is the sum, not one merged interval."""
    tl = load_trace(REPRO / "lane_gap.json", cache=False)
    (dev,) = device_overlap(tl.events)
    assert (dev.device, dev.compute_ns) == (1, 6239 + 10000)
    assert lane_stats(tl.events)["busy_ns"].tolist() == [16239]
    k = tl.events[tl.events["kind"] == "kernel"]
    assert k["start_ns"].iloc[1] - k["end_ns"].iloc[0] == 101


@pytest.mark.slow
def test_pytorch_1_8_resnet_places_its_gpu_work():
    """Used to give 0 GPUs and 0 kernels: its categories are capitalised and its GPU tids text."""
    tl = load_trace(EXTERNAL / "kineto_resnet50_num_workers_0_worker0.pt.trace.json.gz", cache=False)
    kinds = tl.events["kind"].value_counts()
    assert kinds["kernel"] == 9564 and kinds["runtime"] == 10920 and kinds["cpu_op"] == 33384
    assert sorted(set(tl.events.loc[tl.events["device"] >= 0, "stream"])) == [7]
    assert "skipped" not in tl.meta.extra


# --- exact times --------------------------------------------------------------------------------------------


def trace(*events: dict, **top) -> bytes:
    return json.dumps({"schemaVersion": 1, "traceEvents": list(events), **top}).encode()  # (big ints too)


def kernel_json(ts: str, dur: str, device: int = 0, stream: int = 7, corr: int = 1, name: str = "k") -> bytes:
    """A kernel event with ts / dur written as the given JSON text (orjson would write a float's repr)."""
    return (
        f'{{"ph": "X", "cat": "kernel", "name": "{name}", "pid": {device}, "tid": {stream}, "ts": {ts}, '
        f'"dur": {dur}, "args": {{"device": {device}, "stream": {stream}, "correlation": {corr}}}}}'
    ).encode()


def raw_trace(*events: bytes, top: str = "") -> bytes:
    return b'{"schemaVersion": 1, ' + top.encode() + b'"traceEvents": [' + b",\n".join(events) + b"]}"


def spans(data: bytes) -> list[tuple[int, int]]:
    ev = parse_kineto_bytes(data, "t").events
    return list(zip(ev["start_ns"].tolist(), ev["end_ns"].tolist()))


def test_sub_nanosecond_digits_round_half_to_even_at_both_ends():
    """More than three decimals (HTA writes ns-resolution traces): start and end = ts + dur are each rounded
    to the nearest ns, halves to even — the same rule for every digit count, so three-decimal traces are exact."""
    got = spans(raw_trace(
        kernel_json("1.0005", "0", corr=1),  # 1000.5 ns -> 1000 (even)
        kernel_json("2.0015", "0", corr=2),  # 2001.5 -> 2002
        kernel_json("3.0004", "0.0002", corr=3),  # start 3000.4 -> 3000, end 3000.6 -> 3001
        kernel_json("5364401446499.2091234", "2621.0370005", corr=4),
    ))
    assert got == [(1000, 1000), (2002, 2002), (3000, 3001), (5364401446499209, 5364401449120246)]


def test_times_as_exponents_and_strings_are_read_exactly():
    got = spans(raw_trace(
        kernel_json("1.5e3", "2.5E-3", corr=1),  # what json.dumps writes for small floats
        kernel_json('"12.25"', '"1"', corr=2),  # numbers as strings, read as Perfetto does
        kernel_json("-1.5", "1", corr=3),
    ))
    assert sorted(got) == [(-1500, -500), (12250, 13250), (1500000, 1500002)]


def test_fixed_point_agrees_with_fractions():
    rng = random.Random(11)
    texts = []
    for _ in range(3000):
        whole = rng.choice([0, rng.randrange(10 ** rng.randrange(1, 17))])
        decimals = "".join(rng.choice("0123456789") for _ in range(rng.randrange(0, 10)))
        texts.append(("-" if rng.random() < 0.2 else "") + str(whole) + ("." + decimals if decimals else ""))
    texts += ["1e5", '"1"', "null", "", "12.3456789012"]
    floor, sub, ok = _fixed_point([_PAD_RAW, *[msgspec.Raw(t.encode()) for t in texts], _PAD_RAW])
    for text, f, s, good in zip(texts, floor.tolist(), sub.tolist(), ok.tolist()):
        if good:
            assert Fraction(f) + Fraction(s, 10**9) == Fraction(Decimal(text)) * 1000, text
        else:  # left to the exact one-at-a-time path
            assert not text[-1:].isdigit() or "e" in text or len(text.lstrip("-").split(".")[0]) > 15 \
                or len(text.split(".")[-1]) > 8, text


def test_kinetos_own_numbers_are_read_exactly_by_the_short_path():
    # "%.3f" numbers, as Kineto writes them, take _kineto_ns; a chunk with anything else, the general path
    rng = random.Random(12)
    texts = [str(rng.randrange(10 ** rng.randrange(1, 16))) + "." + f"{rng.randrange(1000):03d}" for _ in range(3000)]
    texts += ["0.000", "9199999999999999.999", "1.500", "1790857026000000.123"]
    joined = _RAW_LIST_ENCODER.encode([_PAD_RAW, *[msgspec.Raw(t.encode()) for t in texts], _PAD_RAW])
    got = _kineto_ns(joined, len(texts))
    assert got is not None
    assert got.tolist() == [int(Decimal(t) * 1000) for t in texts]
    for odd in ("9200000000000000.000", "1.5", "12", "-1.500", "1.2345", "1e3", '"1.500"', "null", "12345678901234567.000"):
        joined = _RAW_LIST_ENCODER.encode([_PAD_RAW, *[msgspec.Raw(t.encode()) for t in ["1.000", odd]], _PAD_RAW])
        assert _kineto_ns(joined, 2) is None, odd


def test_ts_not_a_number_is_skipped_and_counted():
    tl = parse_kineto_bytes(raw_trace(
        kernel_json('"soon"', "1", corr=1), kernel_json("true", "1", corr=2), kernel_json("null", "1", corr=3),
        kernel_json("10", '"long"', corr=4), kernel_json("20", "1", corr=5),
        b'{"ph": "X", "cat": "kernel", "name": "no ts", "pid": 0, "tid": 7, "dur": 1}',
    ), "t")
    assert tl.events["start_ns"].tolist() == [20000]
    assert tl.meta.extra["skipped"] == {"dur not a number": 1, "ts missing": 2, "ts not a number": 2}


# --- tolerant args ------------------------------------------------------------------------------------------


def test_args_of_any_type_are_read_where_exact_and_dropped_otherwise():
    events = [
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoD (Device -> Device)", "pid": 0, "tid": 3, "ts": 1,
         "dur": 1, "args": {"device": "1", "stream": "3", "correlation": 2**64, "bytes": "0x10"}},
        {"ph": "X", "cat": "gpu_memset", "name": "Memset (Device)", "pid": 0, "tid": 3, "ts": 2, "dur": 1,
         "args": {"device": 1, "stream": 3, "correlation": "7", "bytes": True}},
        {"ph": "X", "cat": "cuda_runtime", "name": "hipMemcpyAsync", "pid": 2**70, "tid": 5.5, "ts": 3, "dur": 1,
         "args": {"correlation": 9223372036854775808, "bytes": "128", "stream": "0x0"}},
        {"ph": "X", "cat": 5, "name": ["odd"], "pid": "12", "tid": None, "ts": 4, "dur": 1, "args": "none"},
    ]
    ev = parse_kineto_bytes(trace(*events), "t").events
    copy, memset, call, odd = (ev.iloc[i] for i in range(4))
    assert (copy["device"], copy["stream"]) == (1, 3)
    assert pd.isna(copy["correlation"]) and pd.isna(copy["bytes"])
    assert memset["correlation"] == 7 and pd.isna(memset["bytes"])
    assert (call["pid"], call["tid"], call["bytes"]) == (-1, -1, 128) and pd.isna(call["correlation"])
    assert (odd["kind"], odd["name"], odd["pid"]) == ("other", "", 12)


def test_correlation_beyond_int64_in_typed_chunks_is_missing_not_an_error():
    events = [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1, "dur": 1,
               "args": {"device": 0, "stream": 7, "correlation": 2**63 + 5}}]
    ev = parse_kineto_bytes(trace(*events), "t").events
    assert pd.isna(ev["correlation"].iloc[0])


def test_device_properties_with_an_odd_id_are_ignored_not_fatal():
    tl = parse_kineto_bytes(trace(
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1, "dur": 1, "args": {"device": 0}},
        deviceProperties=[{"id": "x", "name": "G"}, {"id": "1", "name": "H"}],
        baseTimeNanoseconds="soon",
    ), "t")
    assert tl.meta.gpu_names == {1: "H"}
    assert tl.meta.extra["ignored"] == {
        "baseTimeNanoseconds": "not an integer", "deviceProperties": "an entry without a GPU index"
    }


def test_entries_that_are_not_events_are_counted():
    tl = parse_kineto_bytes(
        b'{"traceEvents": [5, null, {"name": "no phase"}, {"ph": "v", "name": "unknown phase"},'
        + kernel_json("1", "1") + b"]}", "t"
    )
    assert len(tl.events) == 1
    assert tl.meta.extra["skipped"] == {"no ph": 1, "not an event object": 2}


@pytest.mark.slow
def test_a_typed_chunk_failing_midway_is_read_loosely_with_the_same_result():
    """Chunks of a big trace are decoded typed; one with a string arg is decoded again loosely. The result
    equals the careful path's (a bare array, pre-split by msgspec)."""
    rng = random.Random(3)
    events = []
    for i in range(12000):
        e = {"ph": "X", "cat": "kernel", "name": f"k{i % 7}", "pid": 0, "tid": 7, "ts": 1000 + i * 10,
             "dur": rng.randrange(1, 9), "args": {"device": 0, "stream": 7, "correlation": i, "bytes": i}}
        if i % 5000 == 4999:
            e["args"]["bytes"] = str(i)
        events.append(e)
    fast = parse_kineto_bytes(trace(*events), "t")
    careful = parse_kineto_bytes(orjson.dumps(events), "t")
    pd.testing.assert_frame_equal(fast.events, careful.events)
    assert len(fast.events) == 12000 and fast.events["bytes"].tolist() == list(range(12000))


# --- every generation and vendor ----------------------------------------------------------------------------


def test_capitalised_categories_map_like_today_s():
    names = ["Kernel", "Memcpy", "Memset", "Runtime", "Operator", "Trace"]
    events = [{"ph": "X", "cat": c, "name": c, "pid": 0, "tid": 7, "ts": i, "dur": 1,
               "args": {"device": 0, "stream": 7}} for i, c in enumerate(names)]
    ev = parse_kineto_bytes(trace(*events), "t").events
    assert ev["kind"].astype(str).tolist() == ["kernel", "memcpy", "memset", "runtime", "cpu_op"]


def test_rocm_copy_names():
    assert copy_kind_from_name("Memcpy HtoD (Host -> Device)") == "HtoD"
    assert copy_kind_from_name("CopyDeviceToHost") == "DtoH"
    assert copy_kind_from_name("CopyHostToDevice") == "HtoD"
    assert copy_kind_from_name("CopyDeviceToDevice") == "DtoD"


def test_gpu_rows_on_pid_device_and_unplaceable_gpu_work():
    events = [
        {"ph": "X", "cat": "kernel", "name": "pid is the device", "pid": 1, "tid": 5, "ts": 1, "dur": 1},
        {"ph": "X", "cat": "kernel", "name": "named device", "pid": "GPU 2", "tid": "stream 9", "ts": 1, "dur": 1},
        {"ph": "X", "cat": "kernel", "name": "nowhere", "pid": "Spans", "tid": "x", "ts": 1, "dur": 1},
    ]
    tl = parse_kineto_bytes(trace(*events), "t")
    ev = tl.events.set_index("name")
    assert (ev.loc["pid is the device", "device"], ev.loc["pid is the device", "stream"]) == (1, 5)
    assert (ev.loc["named device", "device"], ev.loc["named device", "stream"]) == (2, 9)
    assert "nowhere" not in ev.index
    assert tl.meta.extra["skipped"] == {"GPU work without a device": 1}


def test_begin_end_pairs_become_intervals():
    e = lambda ph, ts, tid=1, name="", cat="user_annotation": {  # noqa: E731
        "ph": ph, "ts": ts, "pid": 1, "tid": tid, "name": name, "cat": cat}
    events = [
        e("B", 10, name="outer"), e("B", 12, name="inner"), e("B", 11, tid=2, name="other thread"),
        e("E", 15), e("E", 20), e("E", 30, tid=2),
        e("E", 40, tid=3),  # nothing open on thread 3
        e("B", 50, tid=4, name="never closed"),
        {"ph": "B", "ts": 60, "pid": 0, "tid": 7, "name": "k", "cat": "kernel", "args": {"device": 0, "stream": 7}},
        {"ph": "E", "ts": 61.5, "pid": 0, "tid": 7},
    ]
    tl = parse_kineto_bytes(trace(*events), "t")
    ev = tl.events.set_index("name")
    assert (ev.loc["outer", "start_ns"], ev.loc["outer", "end_ns"]) == (10_000, 20_000)
    assert (ev.loc["inner", "start_ns"], ev.loc["inner", "end_ns"]) == (12_000, 15_000)
    assert (ev.loc["other thread", "start_ns"], ev.loc["other thread", "end_ns"]) == (11_000, 30_000)
    assert ev.loc["outer", "kind"] == "range"
    (dev,) = device_overlap(tl.events)
    assert (dev.kernels, dev.compute_ns) == (1, 1500)
    assert tl.meta.extra["skipped"] == {"B without E": 1, "E without B": 1}


# --- what tracer summary says -------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("text", ['{"traceEvents": []}', "[]"])
def test_empty_trace_is_an_empty_summary(tmp_path, text):
    p = tmp_path / "empty.json"
    p.write_text(text)
    proc = cli_main("summary", str(p))
    assert proc.returncode == 0, proc.stderr
    assert "no gpu work in this trace" in proc.stdout.lower()
    assert "holds no events" in proc.stderr and "Traceback" not in proc.stderr
    out = json.loads(cli_main("summary", "--json", str(p)).stdout)
    assert (out["devices"], out["events"]) == ({}, 0)


@pytest.mark.slow
def test_summary_names_skipped_events_and_strict_refuses_them(tmp_path):
    p = tmp_path / "soon.json"
    p.write_bytes(raw_trace(kernel_json('"soon"', "1", corr=1), kernel_json('"later"', "1", corr=2),
                            kernel_json("true", "1", corr=3), kernel_json("5", "1", corr=4)))
    proc = cli_main("summary", str(p))
    assert proc.returncode == 0
    assert proc.stderr.strip().splitlines() == [f"tracer: warning: {p}: 3 events skipped: ts not a number"]
    out = json.loads(cli_main("summary", "--json", str(p)).stdout)
    assert out["meta"]["skipped"] == {"ts not a number": 3}
    assert out["devices"]["0"]["kernels"] == 1
    strict = cli_main("summary", "--strict", str(p))
    assert strict.returncode == 2 and strict.stdout == ""
    assert strict.stderr.strip().splitlines() == [
        f"tracer: error: {p}: 3 events skipped: ts not a number (--strict)"
    ]
    clean = cli_main("summary", "--strict", str(REPRO / "epoch_us.json"))
    assert clean.returncode == 0 and clean.stderr == ""


@pytest.mark.slow
def test_rocprofv3_json_is_one_line_that_says_what_to_record_instead(tmp_path):
    p = tmp_path / "results.json"
    p.write_text('{"rocprofiler-sdk-tool": [{"metadata": {"pid": 1}, "buffer_records": {"kernel_dispatch": []}}]}')
    proc = cli_main("summary", str(p))
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "rocprofv3" in lines[0] and "torch.profiler" in lines[0]
