"""nsys-sqlite export: Nsight Systems' schema, and round trips through tracer's own nsys parser.

`nsys stats` itself runs only on the GPU machine (docs/exports.md has that comparison); here the file is checked
against the real export in tests/data (same tables, columns, types, ENUM rows) and with SQL that joins what the
nsys reports join.
"""

from __future__ import annotations

import gzip
import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tracer.analysis.summary import summarize
from tracer.exporters import export_timeline
from tracer.exporters._nsys_schema import ENUM_TABLES, TABLE_DDL
from tracer.exporters.nsys_sqlite import global_ids, short_kernel_name
from tracer.parsers import load_trace
from tracer.parsers.nsys import parse_nsys_sqlite
from tracer.timeline import Timeline, TraceMeta, build_events

DATA = Path(__file__).parent / "data"
KINETO = ["copy_side_stream.json.gz", "mlp_train_200.json.gz", "two_streams.json.gz", "copy_nonblocking_same_stream.json.gz"]


@pytest.fixture(scope="module")
def real_export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("real") / "real.sqlite"
    out.write_bytes(gzip.decompress((DATA / "nsys_compute_copy.sqlite.gz").read_bytes()))
    return out


def _export(timeline: Timeline, tmp_path: Path, name: str = "t.sqlite") -> Path:
    return export_timeline(timeline, tmp_path / name).path


def _columns(con: sqlite3.Connection, table: str) -> list[tuple[str, str, int, int]]:
    return [(r[1], r[2], r[3], r[5]) for r in con.execute(f'PRAGMA table_info("{table}")')]


def _rows(events: pd.DataFrame, *, fold_driver: bool) -> pd.DataFrame:
    """Rows as comparable plain values, in a canonical order."""
    df = events.copy()
    for c in ("kind", "copy_kind", "name"):
        df[c] = df[c].astype(str)
    if fold_driver:
        df["kind"] = df["kind"].replace({"driver": "runtime"})
    df = df.astype({"bytes": "float64", "correlation": "float64"})
    return df.sort_values(list(df.columns), kind="stable").reset_index(drop=True)


def _gpu_rows_owned(events: pd.DataFrame) -> pd.DataFrame:
    """GPU rows with pid = the process whose CUDA call launched them (what nsys records; Kineto puts the device
    index there). Independent of the exporter's own lookup: a plain merge on the correlation id."""
    ev = events.copy()
    calls = ev[ev["kind"].isin(["runtime", "driver"]) & ev["correlation"].notna()]
    owner = dict(zip(calls["correlation"].astype(int), calls["pid"]))
    gpu = ev["kind"].isin(["kernel", "memcpy", "memset"]) & (ev["device"] >= 0)
    ev.loc[gpu, "pid"] = [owner.get(int(c), p) for c, p in zip(ev.loc[gpu, "correlation"], ev.loc[gpu, "pid"])]
    return ev


# --- the schema is Nsight Systems' own ---


def test_tables_and_columns_match_a_real_nsys_export(tmp_path: Path, real_export: Path) -> None:
    out = _export(load_trace(DATA / "mlp_train_200.json.gz", cache=False), tmp_path)
    mine, real = sqlite3.connect(out), sqlite3.connect(real_export)
    ours = {r[0] for r in mine.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    theirs = {r[0] for r in real.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    shared = ours & theirs
    assert {"StringIds", "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS",
            "TARGET_INFO_GPU", "ENUM_CUDA_MEMCPY_OPER", "ENUM_CUDA_MEM_KIND", "META_DATA_EXPORT"} <= shared
    for table in sorted(shared):
        assert _columns(mine, table) == _columns(real, table), table
    # the only tables nsys would not know are tracer's own, and MEMSET (the real export had no memsets)
    assert ours - theirs == {"CUPTI_ACTIVITY_KIND_MEMSET", "TRACER_EVENTS", "TRACER_META"}


def test_enum_rows_are_the_real_exports(real_export: Path) -> None:
    real = sqlite3.connect(real_export)
    for table, (_ddl, rows) in ENUM_TABLES.items():
        assert list(rows) == real.execute(f"SELECT id, name, label FROM {table} ORDER BY id").fetchall(), table


def test_memset_table_has_the_columns_nsys_reports_query() -> None:
    con = sqlite3.connect(":memory:")
    con.execute(TABLE_DDL["CUPTI_ACTIVITY_KIND_MEMSET"])
    cols = {c[0] for c in _columns(con, "CUPTI_ACTIVITY_KIND_MEMSET")}
    assert {"start", "end", "deviceId", "contextId", "greenContextId", "streamId", "correlationId", "globalPid",
            "value", "bytes", "memKind"} <= cols


def test_global_ids_pack_like_nsys(real_export: Path) -> None:
    """The fixture's python3 (pid 709) main thread is 0x10002c50002c5: vmId 1, pid and tid in 24 bits each."""
    real = sqlite3.connect(real_export)
    gtid = real.execute("SELECT DISTINCT globalTid FROM NVTX_EVENTS").fetchone()[0]
    gpid = real.execute("SELECT DISTINCT globalPid FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    assert global_ids(np.array([709]), np.array([709]))[0] == gtid
    assert global_ids(np.array([709]))[0] == gpid


def test_short_kernel_names_match_nsys(real_export: Path) -> None:
    real = sqlite3.connect(real_export)
    pairs = real.execute(
        "SELECT DISTINCT d.value, s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k "
        "JOIN StringIds d ON d.id = k.demangledName JOIN StringIds s ON s.id = k.shortName"
    ).fetchall()
    assert len(pairs) == 2
    for demangled, short in pairs:
        assert short_kernel_name(demangled) == short
    assert short_kernel_name("sm80_xmma_gemm_f32f32_f32f32_f32_nn_n") == "sm80_xmma_gemm_f32f32_f32f32_f32_nn_n"
    assert short_kernel_name("void at::native::vectorized_elementwise_kernel<4, F>(int, F)") == (
        "vectorized_elementwise_kernel"
    )


# --- what nsys stats reports compute, from the file ---


def test_report_joins_give_tracers_numbers(tmp_path: Path) -> None:
    """Per-name kernel time (cuda_gpu_kern_sum), memory-op time by ENUM label (cuda_gpu_mem_time_sum), device
    names (cuda_gpu_trace) and NVTX totals (nvtx_sum): the same numbers as the timeline."""
    timeline = load_trace(DATA / "copy_side_stream.json.gz", cache=False)
    con = sqlite3.connect(_export(timeline, tmp_path))
    ev = timeline.events
    kernels = ev[ev["kind"] == "kernel"]
    got = dict(con.execute(
        "SELECT s.value, sum(k.end - k.start) FROM CUPTI_ACTIVITY_KIND_KERNEL k "
        "JOIN StringIds s ON s.id = k.demangledName GROUP BY 1"
    ).fetchall())
    want = (kernels["end_ns"] - kernels["start_ns"]).groupby(kernels["name"].astype(str)).sum().to_dict()
    assert got == want
    assert con.execute(
        "SELECT '[CUDA memcpy ' || o.label || ']', count(*), sum(m.end - m.start), sum(m.bytes), src.label, dst.label "
        "FROM CUPTI_ACTIVITY_KIND_MEMCPY m JOIN ENUM_CUDA_MEMCPY_OPER o ON o.id = m.copyKind "
        "JOIN ENUM_CUDA_MEM_KIND src ON src.id = m.srcKind JOIN ENUM_CUDA_MEM_KIND dst ON dst.id = m.dstKind "
        "GROUP BY 1"
    ).fetchall() == [("[CUDA memcpy Device-to-Host]", 50, 57973731, 50 * 64_000_000, "Device", "Pinned")]
    assert con.execute(
        "SELECT DISTINCT printf('%s (%d)', g.name, k.deviceId) FROM CUPTI_ACTIVITY_KIND_KERNEL k "
        "LEFT JOIN TARGET_INFO_GPU g ON g.id = k.deviceId"
    ).fetchall() == [("NVIDIA H200 (0)",)]
    assert con.execute("SELECT text, eventType, end - start FROM NVTX_EVENTS").fetchall() == [
        ("copy_side_stream", 59, 8146079)
    ]
    # cuda_kern_exec_* join kernels to their launch by correlation id within the process
    assert con.execute(
        "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN CUPTI_ACTIVITY_KIND_RUNTIME r "
        "ON k.correlationId = r.correlationId AND k.globalPid = (r.globalTid & 0xFFFFFFFFFF000000)"
    ).fetchone() == (50,)


@pytest.mark.slow
def test_memsets_and_driver_calls(tmp_path: Path) -> None:
    con = sqlite3.connect(_export(load_trace(DATA / "mlp_train_200.json.gz", cache=False), tmp_path))
    assert con.execute(
        "SELECT count(*), sum(bytes), mk.label FROM CUPTI_ACTIVITY_KIND_MEMSET m "
        "JOIN ENUM_CUDA_MEM_KIND mk ON mk.id = m.memKind GROUP BY 3"
    ).fetchall() == [(400, 166400, "Device")]
    # nsys 2025 keeps driver calls in the RUNTIME table, told apart by ENUM_NSYS_EVENT_CLASS
    assert con.execute(
        "SELECT c.name, count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN ENUM_NSYS_EVENT_CLASS c "
        "ON c.id = r.eventClass GROUP BY 1 ORDER BY 1"
    ).fetchall() == [("TRACE_PROCESS_EVENT_CUDA_DRIVER", 200), ("TRACE_PROCESS_EVENT_CUDA_RUNTIME", 3602)]


def test_overlapping_ranges_become_start_end_ranges(tmp_path: Path) -> None:
    """Push/pop ranges must nest per thread; ranges that don't are written as start/end ranges."""
    ev = build_events({
        "start_ns": [100, 150, 300, 120], "end_ns": [200, 250, 400, 180],
        "kind": ["range"] * 4, "name": ["a", "b", "c", "inner"], "pid": [5] * 4, "tid": [6] * 4,
    })
    con = sqlite3.connect(_export(Timeline(ev, TraceMeta(format="test")), tmp_path))
    rows = con.execute("SELECT text, eventType, rangeId IS NOT NULL, endGlobalTid FROM NVTX_EVENTS ORDER BY start").fetchall()
    gtid = int(global_ids(np.array([5]), np.array([6]))[0])
    assert rows == [("a", 59, 0, None), ("inner", 59, 0, None), ("b", 60, 1, gtid), ("c", 59, 0, None)]


def test_ids_beyond_24_bits_are_renumbered_with_a_note(tmp_path: Path) -> None:
    ev = build_events({"start_ns": [0], "end_ns": [5], "kind": ["runtime"], "name": ["cudaFree"],
                       "pid": [7], "tid": [1 << 30]})
    result = export_timeline(Timeline(ev, TraceMeta(format="test")), tmp_path / "t.sqlite")
    assert result.notes == [f"1 thread id(s) outside nsys' 24-bit range were renumbered: {1 << 30}→16777215"]
    back = parse_nsys_sqlite(result.path)
    assert back.events["tid"].tolist() == [16777215]


# --- round trips through tracer's nsys parser ---


NATIVE = ["kernel", "memcpy", "memset", "runtime", "driver", "range"]


@pytest.mark.slow
@pytest.mark.parametrize("name", KINETO)
def test_kineto_round_trip_native_rows_are_exact(tmp_path: Path, name: str) -> None:
    """Kineto → nsys-sqlite → tracer's nsys parser: every kernel, copy, memset, CUDA call and range comes back
    with the same times (ns), names, device, stream, pid/tid, bytes and correlation.

    Two differences are by design: a GPU row's pid is the process that launched it (nsys' globalPid; Kineto has
    the device index there), and CUDA driver calls are told from runtime calls by eventClass, which this test
    does not require of the parser (see test_kineto_round_trip_whole_timeline)."""
    timeline = load_trace(DATA / name, cache=False)
    back = load_trace(_export(timeline, tmp_path))
    want = _gpu_rows_owned(timeline.events)
    want = want[want["kind"].isin(NATIVE)]
    got = back.events[back.events["kind"].isin(NATIVE)]
    pd.testing.assert_frame_equal(_rows(got, fold_driver=True), _rows(want, fold_driver=True))
    assert back.meta.gpu_names == timeline.meta.gpu_names


@pytest.mark.slow
@pytest.mark.parametrize("name", KINETO)
def test_kineto_round_trip_gpu_summary_is_the_same(tmp_path: Path, name: str) -> None:
    timeline = load_trace(DATA / name, cache=False)
    a = summarize(timeline)
    b = summarize(load_trace(_export(timeline, tmp_path)))
    for key in ("devices", "lanes", "gpu_span_ns", "concurrent_gpus_ns", "gpu_names", "idle", "top_kernels", "copies"):
        assert b.get(key) == a.get(key), key


@pytest.mark.slow
@pytest.mark.parametrize("name", KINETO)
def test_kineto_round_trip_whole_timeline(tmp_path: Path, name: str) -> None:
    """The whole timeline and the whole `tracer summary --json` survive the round trip (but for the GPU rows'
    pid, see above, and the format/source fields)."""
    timeline = load_trace(DATA / name, cache=False)
    back = load_trace(_export(timeline, tmp_path))
    pd.testing.assert_frame_equal(_rows(back.events, fold_driver=False),
                                  _rows(_gpu_rows_owned(timeline.events), fold_driver=False))
    a, b = summarize(timeline), summarize(back)
    for s in (a, b):
        s.pop("format"), s.pop("source")
    assert b == a


def test_nsys_round_trip_is_exact(tmp_path: Path) -> None:
    """A real nsys export → tracer → nsys-sqlite → tracer: the same timeline, row for row."""
    timeline = load_trace(DATA / "nsys_compute_copy.sqlite.gz", cache=False)
    back = load_trace(_export(timeline, tmp_path))
    pd.testing.assert_frame_equal(_rows(back.events, fold_driver=False), _rows(timeline.events, fold_driver=False))
    a, b = summarize(timeline), summarize(back)
    for s in (a, b):
        s.pop("source")
    assert b == a


def test_timeline_meta_is_kept(tmp_path: Path) -> None:
    timeline = load_trace(DATA / "copy_side_stream.json.gz", cache=False)
    con = sqlite3.connect(_export(timeline, tmp_path))
    import orjson

    meta = orjson.loads(con.execute("SELECT value FROM TRACER_META WHERE name = 'timeline_meta'").fetchone()[0])
    assert TraceMeta.from_dict(meta) == timeline.meta
    assert dict(con.execute("SELECT name, value FROM META_DATA_EXPORT").fetchall())["EXPORT_SCHEMA_VERSION"] == "3.20.3"
    assert con.execute("SELECT pid, name FROM PROCESSES").fetchall() == [(424, "python3")]
    assert con.execute(
        "SELECT s.value FROM ThreadNames t JOIN StringIds s ON s.id = t.nameId"
    ).fetchall() == [("thread 424 (python3)",)]


def test_one_ranks_trace_keeps_its_rank_through_the_sqlite_export(tmp_path: Path) -> None:
    # A rank-1 trace exported to SQLite read back with every kernel on rank 0 (the rank lived only in
    # TRACER_META's metadata), so `summary` keyed its GPU as 0/1 and `sql` disagreed with the JSON.
    src = DATA / "external" / "HTA_trace_filter_sampled_rank-1.json.gz"
    kineto = load_trace(src, cache=False)
    assert set(kineto.events["rank"].unique().tolist()) == {1}
    out = tmp_path / "rank1.sqlite"
    export_timeline(kineto, out)
    back = load_trace(out, cache=False)
    assert set(back.events["rank"].unique().tolist()) == {1}
    by_kind = back.events.groupby(["kind", "rank"], observed=True).size()
    assert by_kind.to_dict() == kineto.events.groupby(["kind", "rank"], observed=True).size().to_dict()
