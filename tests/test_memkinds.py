"""Copy memory kinds as timeline columns (src_mem, dst_mem) and the nsys enums defined once (issue 12).

The kinds come from Kineto's names ("Memcpy DtoH (Device -> Pinned)", "Memset (Device)") and from nsys'
srcKind / dstKind / memKind ids; the nsys-sqlite exporter writes the ids from the columns, and Parquet timelines
written before the columns existed (timeline schema 1: the bundled runs) get them from the names.
"""

from __future__ import annotations

import gzip
import sqlite3
from collections import Counter
from pathlib import Path

import numpy as np
import orjson
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tracer.exporters import export_timeline
from tracer.exporters._nsys_schema import ENUM_TABLES
from tracer.files import nsys_enums
from tracer.files.storage import read_parquet_meta, write_timeline_parquet
from tracer.parsers import load_trace
from tracer.parsers.kineto import parse_kineto_bytes
from tracer.sql.session import query
from tracer.timeline import COLUMNS, MEM_KINDS, SCHEMA_VERSION, Timeline, TraceMeta, build_events, concat, validate

DATA = Path(__file__).parent / "data"
EXTERNAL = DATA / "external"
EXAMPLES = Path(__file__).parent.parent / "tracer" / "examples"


def _kinds(events: pd.DataFrame) -> dict[tuple[str, str, str, str], int]:
    """(kind, copy_kind, src_mem, dst_mem) -> rows, for the copies and memsets."""
    gpu = events[events["kind"].isin(["memcpy", "memset"])]
    return dict(Counter(zip(*(gpu[c].astype(str) for c in ("kind", "copy_kind", "src_mem", "dst_mem")))))


# --- the schema ---


def test_schema_2_added_the_two_memory_kind_columns() -> None:
    assert SCHEMA_VERSION >= 2  # (3 added the communication columns after them)
    assert list(COLUMNS)[12:14] == ["src_mem", "dst_mem"]
    for c in ("src_mem", "dst_mem"):
        assert list(COLUMNS[c].categories) == list(MEM_KINDS)
    assert MEM_KINDS[0] == "" and {"pageable", "pinned", "device", "managed", "array", "host", "other"} <= set(MEM_KINDS)


def test_build_events_defaults_them_to_empty_and_validate_checks_their_categories() -> None:
    ev = build_events({"start_ns": [0, 5], "end_ns": [1, 6], "kind": ["memcpy", "kernel"], "name": ["a", "b"]})
    assert ev["src_mem"].tolist() == ev["dst_mem"].tolist() == ["", ""]
    validate(ev)
    bad = ev.assign(src_mem=ev["src_mem"].astype(str).astype("category"))
    with pytest.raises(Exception, match="src_mem"):
        validate(bad)


def test_concat_keeps_the_memory_kinds() -> None:
    def one(mem: str) -> Timeline:
        ev = build_events({"start_ns": [0], "end_ns": [1], "kind": ["memcpy"], "name": ["c"], "copy_kind": ["HtoD"],
                           "src_mem": [mem], "dst_mem": ["device"], "device": [0], "stream": [7]})
        return Timeline(ev, TraceMeta(format="test"))

    job = concat([one("pinned"), one("pageable")], ranks=[0, 1])
    validate(job.events)
    assert sorted(zip(job.events["rank"], job.events["src_mem"].astype(str))) == [(0, "pinned"), (1, "pageable")]


# --- one definition of nsys' enums ---


def test_the_enum_rows_written_are_nsys_enums_rows() -> None:
    assert ENUM_TABLES["ENUM_CUDA_MEMCPY_OPER"][1] == tuple(r[:3] for r in nsys_enums.MEMCPY_OPER)
    assert ENUM_TABLES["ENUM_CUDA_MEM_KIND"][1] == tuple(r[:3] for r in nsys_enums.MEM_KIND)
    # (tests/test_export_nsys.py compares every ENUM table with a real nsys export)


@pytest.mark.parametrize(
    ("table", "symbol", "value"),
    [
        ("ENUM_NSYS_EVENT_CLASS", "TRACE_PROCESS_EVENT_CUDA_RUNTIME", nsys_enums.EVENT_CLASS_RUNTIME),
        ("ENUM_NSYS_EVENT_CLASS", "TRACE_PROCESS_EVENT_CUDA_DRIVER", nsys_enums.EVENT_CLASS_DRIVER),
        ("ENUM_NSYS_EVENT_TYPE", "NvtxMark", nsys_enums.NVTX_MARK),
        ("ENUM_NSYS_EVENT_TYPE", "NvtxPushPopRange", nsys_enums.NVTX_PUSHPOP),
        ("ENUM_NSYS_EVENT_TYPE", "NvtxStartEndRange", nsys_enums.NVTX_STARTEND),
        ("ENUM_CUDA_MEM_KIND", "CUDA_MEMOPR_MEMORY_KIND_UNKNOWN", nsys_enums.MEM_KIND_UNKNOWN),
    ],
)
def test_each_id_tracer_uses_is_the_one_nsys_gives_that_symbol(table: str, symbol: str, value: int) -> None:
    assert {name: i for i, name, _label in ENUM_TABLES[table][1]}[symbol] == value


def test_every_memory_kind_has_an_nsys_id_and_the_known_ones_come_back() -> None:
    assert set(nsys_enums.MEM_KIND_ID) == set(MEM_KINDS)
    assert set(nsys_enums.COPY_KIND_BY_OPER.values()) <= {"HtoD", "DtoH", "DtoD", "HtoH", "PtoP", "Other"}
    for mem in MEM_KINDS:
        back = nsys_enums.mem_of_id(nsys_enums.MEM_KIND_ID[mem])
        # nsys has no word for "host" (pinned or pageable, not said) nor for a kind tracer does not know
        assert back == ("" if mem in ("host", "other") else mem)
    assert nsys_enums.mem_of_id(None) == nsys_enums.mem_of_id(float("nan")) == ""
    assert nsys_enums.mem_of_id(42) == "other"


@pytest.mark.parametrize("oper", nsys_enums.MEMCPY_OPER, ids=lambda r: r[1])
def test_the_memcpy_operation_comes_back_from_direction_and_kinds(oper: tuple[int, str, str, str]) -> None:
    i, symbol, _label, direction = oper
    src = "array" if "_ATO" in symbol else "device"
    dst = "array" if symbol.endswith("TOA") else "device"
    back = nsys_enums.memcpy_oper(direction, src, dst)
    # the unified-memory migrations (11-13) read as the plain direction they move data in
    assert back == {11: 1, 12: 2, 13: 8}.get(i, i)


@pytest.mark.parametrize(
    ("name", "kind", "kinds"),
    [
        ("Memcpy DtoH (Device -> Pinned)", "memcpy", ("device", "pinned")),
        ("Memcpy HtoD (Pageable -> Device)", "memcpy", ("pageable", "device")),
        ("Memcpy HtoA (Pageable -> Array)", "memcpy", ("pageable", "array")),
        ("Memcpy HtoD (Managed Static -> Device Static)", "memcpy", ("managed_static", "device_static")),
        ("Memcpy HtoD (Host -> Device)", "memcpy", ("host", "device")),  # ROCm: pinned or not is not said
        ("Memcpy DtoD (Unknown -> <unknown>)", "memcpy", ("", "")),  # CUPTI's and libkineto's unknown
        ("Memcpy DtoD (Shiny -> Device)", "memcpy", ("other", "device")),
        ("CopyDeviceToHost", "memcpy", ("device", "host")),  # older roctracer builds
        ("Memcpy HtoD", "memcpy", ("", "")),
        ("Memset (Device)", "memset", ("", "device")),
        ("Memset (Managed)", "memset", ("", "managed")),
        ("FillBuffer", "memset", ("", "")),
        ("Memcpy DtoH (Device -> Pinned)", "kernel", ("", "")),  # only copies and memsets have kinds
    ],
)
def test_kinds_from_kineto_names(name: str, kind: str, kinds: tuple[str, str]) -> None:
    assert nsys_enums.mem_kinds_from_name(name, kind) == kinds


# --- the parsers ---


@pytest.mark.parametrize(
    ("trace", "want"),
    [
        ("copy_side_stream.json.gz", {("memcpy", "DtoH", "device", "pinned"): 50}),
        ("pair_kineto.json.gz", {("memcpy", "DtoH", "device", "pinned"): 20, ("memcpy", "HtoD", "pageable", "device"): 1}),
        ("mlp_train_200.json.gz", {("memset", "", "", "device"): 400}),
        ("external/HTA_trace_filter_sampled_rank-0.json.gz", {
            ("memcpy", "HtoD", "pageable", "device"): 16, ("memcpy", "HtoD", "pinned", "device"): 8,
            ("memcpy", "DtoH", "device", "pageable"): 8, ("memcpy", "DtoD", "device", "device"): 8,
            ("memset", "", "", "device"): 10}),
        ("external/HTA_mi250_minitoy_train_ROCm6_2_kineto.json.gz", {("memcpy", "HtoD", "host", "device"): 2}),
        ("external/TraceLens_mi300_resnet_act_checkpoint.json.gz", {
            ("memcpy", "DtoD", "device", "device"): 550, ("memset", "", "", "device"): 108}),
        ("external/kineto_resnet50_num_workers_0_worker0.pt.trace.json.gz", {
            ("memcpy", "HtoD", "pageable", "device"): 12, ("memset", "", "", "device"): 439}),
        ("nsys_compute_copy.sqlite.gz", {("memcpy", "DtoH", "device", "pinned"): 10}),
        ("pair.sqlite.gz", {("memcpy", "DtoH", "device", "pinned"): 20, ("memcpy", "HtoD", "pageable", "device"): 1}),
        ("graph_node.sqlite.gz", {("memcpy", "DtoH", "device", "pageable"): 2}),
    ],
)
def test_parsers_fill_the_kinds_of_real_traces(trace: str, want: dict) -> None:
    events = load_trace(DATA / trace, cache=False).events
    assert _kinds(events) == want
    others = events[~events["kind"].isin(["memcpy", "memset"])]
    assert (others["src_mem"] == "").all() and (others["dst_mem"] == "").all()


def test_kineto_and_nsys_agree_on_the_kinds_of_one_run() -> None:
    """The pair fixture: one process recorded by both profilers."""
    k = _kinds(load_trace(DATA / "pair_kineto.json.gz", cache=False).events)
    n = _kinds(load_trace(DATA / "pair.sqlite.gz", cache=False).events)
    assert k == n


def _nsys_file(path: Path, memcpys: list[tuple], memsets: list[tuple]) -> Path:
    """A minimal export: memcpy rows (copyKind, srcKind, dstKind) and memset rows (memKind,), one ns apart."""
    con = sqlite3.connect(path)
    gpu = "start INT, end INT, deviceId INT, streamId INT, correlationId INT, globalPid INT, bytes INT"
    con.execute("CREATE TABLE StringIds (id INT, value TEXT)")
    con.execute(f"CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY ({gpu}, copyKind INT, srcKind INT, dstKind INT)")
    con.execute(f"CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET ({gpu}, memKind INT)")
    for i, row in enumerate(memcpys):
        con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (?, ?, 0, 7, ?, 0, 8, ?, ?, ?)", (i, i + 1, i, *row))
    for i, row in enumerate(memsets):
        con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_MEMSET VALUES (?, ?, 0, 7, ?, 0, 8, ?)", (i, i + 1, 100 + i, *row))
    con.commit()
    con.close()
    return path


def test_nsys_ids_become_the_columns_and_names_stay_as_they_were(tmp_path: Path) -> None:
    path = _nsys_file(
        tmp_path / "k.sqlite",
        [(2, 2, 1), (1, 0, 2), (3, 0, 3), (8, 4, 4), (8, 5, 6), (1, 7, 2), (1, None, 2), (1, 9, 2)],
        [(2,), (4,), (None,), (7,)],
    )
    ev = load_trace(path).events.sort_values(["kind", "start_ns"])
    got = list(zip(*(ev[c].astype(str) for c in ("kind", "copy_kind", "src_mem", "dst_mem", "name"))))
    assert got == [
        ("memcpy", "DtoH", "device", "pinned", "Memcpy DtoH (Device -> Pinned)"),
        ("memcpy", "HtoD", "pageable", "device", "Memcpy HtoD (Pageable -> Device)"),
        ("memcpy", "HtoD", "pageable", "array", "Memcpy HtoD (Pageable -> Array)"),
        ("memcpy", "DtoD", "managed", "managed", "Memcpy DtoD (Managed -> Managed)"),
        ("memcpy", "DtoD", "device_static", "managed_static", "Memcpy DtoD (Device Static -> Managed Static)"),
        ("memcpy", "HtoD", "", "device", "Memcpy HtoD (Unknown -> Device)"),
        ("memcpy", "HtoD", "", "device", "Memcpy HtoD (Unknown -> Device)"),  # NULL
        ("memcpy", "HtoD", "other", "device", "Memcpy HtoD (Unknown -> Device)"),  # an id nsys 2025 does not have
        ("memset", "", "", "device", "Memset (Device)"),
        ("memset", "", "", "managed", "Memset (Managed)"),
        # no memKind: named "Memset (Device)" as before the columns, but the column says what the file says
        ("memset", "", "", "", "Memset (Device)"),
        ("memset", "", "", "", "Memset (Unknown)"),
    ]


# --- the nsys-sqlite export writes the ids from the columns ---


def _rows(path: Path, sql: str) -> list[tuple]:
    con = sqlite3.connect(path)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def test_export_writes_ids_from_the_columns_not_the_names(tmp_path: Path) -> None:
    """Names that say nothing of memory ("copy"), or say something else: the columns decide."""
    mems = [m for m in MEM_KINDS if m]
    n = len(mems)
    ev = build_events({
        "start_ns": list(range(n)) + [100, 101], "end_ns": list(range(1, n + 1)) + [102, 103],
        "kind": ["memcpy"] * n + ["memset"] * 2,
        "copy_kind": ["HtoD"] * n + ["", ""],
        "name": ["copy"] * (n - 1) + ["Memcpy HtoD (Pinned -> Device)", "fill", "Memset (Device)"],
        "src_mem": mems + ["", ""], "dst_mem": list(reversed(mems)) + ["managed", ""],
        "device": [0] * (n + 2), "stream": [7] * (n + 2), "bytes": [1] * (n + 2),
    })
    out = export_timeline(Timeline(ev, TraceMeta(format="test")), tmp_path / "t.sqlite").path
    ids = nsys_enums.MEM_KIND_ID
    got = _rows(out, "SELECT copyKind, srcKind, dstKind FROM CUPTI_ACTIVITY_KIND_MEMCPY ORDER BY start")
    oper = [nsys_enums.memcpy_oper("HtoD", s, d) for s, d in zip(mems, reversed(mems))]
    assert got == [(o, ids[s], ids[d]) for o, s, d in zip(oper, mems, reversed(mems))]
    assert 3 in oper  # HtoD into an array: Host-to-Array, as nsys records it
    assert _rows(out, "SELECT memKind FROM CUPTI_ACTIVITY_KIND_MEMSET ORDER BY start") == [(4,), (7,)]
    back = load_trace(out).events
    lost = {"host": "", "other": ""}  # nsys' Unknown
    for c in ("src_mem", "dst_mem"):
        assert back[c].astype(str).tolist() == [lost.get(m, m) for m in ev[c].astype(str)]


@pytest.mark.parametrize("fixture", ["nsys_compute_copy.sqlite.gz", "pair.sqlite.gz", "graph_node.sqlite.gz"])
def test_an_nsys_export_reexported_has_the_same_copy_rows(tmp_path: Path, fixture: str) -> None:
    src = tmp_path / "src.sqlite"
    src.write_bytes(gzip.decompress((DATA / fixture).read_bytes()))
    timeline = load_trace(src)
    out = export_timeline(timeline, tmp_path / "out.sqlite").path
    sql = ("SELECT start, end, deviceId, streamId, correlationId, bytes, copyKind, srcKind, dstKind "
           "FROM CUPTI_ACTIVITY_KIND_MEMCPY ORDER BY start, end, correlationId")
    assert _rows(out, sql) == _rows(src, sql)
    back = load_trace(out).events
    cols = ["start_ns", "kind", "copy_kind", "src_mem", "dst_mem", "name"]
    pd.testing.assert_frame_equal(back[cols].astype(str), timeline.events[cols].astype(str))


@pytest.mark.slow
@pytest.mark.parametrize("trace", ["copy_side_stream.json.gz", "pair_kineto.json.gz", "mlp_train_200.json.gz"])
def test_kineto_round_trip_through_nsys_sqlite_keeps_the_kinds(tmp_path: Path, trace: str) -> None:
    timeline = load_trace(DATA / trace, cache=False)
    back = load_trace(export_timeline(timeline, tmp_path / "t.sqlite").path)
    assert _kinds(back.events) == _kinds(timeline.events)


def test_tracer_events_keep_the_kinds_and_older_files_without_them_load(tmp_path: Path) -> None:
    """A memcpy on no GPU goes to TRACER_EVENTS (nsys' tables need a device); its kinds go with it."""
    ev = build_events({"start_ns": [0], "end_ns": [5], "kind": ["memcpy"], "name": ["odd"], "copy_kind": ["HtoH"],
                       "src_mem": ["pageable"], "dst_mem": ["pinned"]})
    out = export_timeline(Timeline(ev, TraceMeta(format="test")), tmp_path / "t.sqlite").path
    assert _rows(out, "SELECT kind, srcMem, dstMem FROM TRACER_EVENTS") == [("memcpy", "pageable", "pinned")]
    back = load_trace(out).events
    assert back[["src_mem", "dst_mem"]].astype(str).values.tolist() == [["pageable", "pinned"]]
    con = sqlite3.connect(out)
    kept = "start, end, kind, copyKind, nameId, deviceId, streamId, pid, tid, rank, bytes, correlationId"
    con.execute(f"CREATE TABLE old AS SELECT {kept} FROM TRACER_EVENTS")
    con.execute("DROP TABLE TRACER_EVENTS")
    con.execute("ALTER TABLE old RENAME TO TRACER_EVENTS")
    con.execute("INSERT INTO TRACER_EVENTS SELECT 10, 20, 'memset', '', nameId, -1, -1, 0, 0, 0, 8, NULL "
                "FROM TRACER_EVENTS")
    con.commit()
    con.close()
    old = load_trace(out).events
    assert old[["kind", "src_mem", "dst_mem"]].astype(str).values.tolist() == [["memcpy", "", ""], ["memset", "", ""]]
    con = sqlite3.connect(out)
    con.execute("ALTER TABLE TRACER_EVENTS ADD COLUMN srcMem TEXT")
    con.execute("UPDATE TRACER_EVENTS SET srcMem = 'shiny'")
    con.commit()
    con.close()
    assert load_trace(out).events["src_mem"].astype(str).tolist() == ["other", "other"]


# --- Parquet written before the columns ---


def _schema_1(timeline: Timeline, path: Path) -> Path:
    """``timeline`` as tracer wrote it before schema 2: no src_mem / dst_mem (nor schema 3's columns),
    schema_version 1."""
    dropped = ["src_mem", "dst_mem", "collective", "pg", "seq", "group_size"]
    table = pa.Table.from_pandas(timeline.events.drop(columns=dropped), preserve_index=False)
    meta = {**timeline.meta.to_dict(), "schema_version": 1}
    table = table.replace_schema_metadata({**(table.schema.metadata or {}), b"tracer": orjson.dumps(meta)})
    pq.write_table(table, path)
    return path


@pytest.mark.slow
@pytest.mark.parametrize("trace", ["pair_kineto.json.gz", "mlp_train_200.json.gz", "two_streams.json.gz",
                                   "external/HTA_trace_filter_sampled_rank-0.json.gz", "nsys_compute_copy.sqlite.gz"])
def test_a_schema_1_parquet_timeline_loads_with_the_kinds_a_parse_gives(tmp_path: Path, trace: str) -> None:
    timeline = load_trace(DATA / trace, cache=False)
    old = _schema_1(timeline, tmp_path / "old.parquet")
    back = load_trace(old)
    # (schema 3's collective metadata is not in such a file: only what the names say comes back)
    meta_cols = ["pg", "seq", "group_size", "bytes"]
    pd.testing.assert_frame_equal(back.events.drop(columns=meta_cols), timeline.events.drop(columns=meta_cols))
    # tracer sql scans it in place and derives the same
    got = query(old, "SELECT kind, copy_kind, src_mem, dst_mem, count(*) AS n FROM events "
                     "WHERE kind IN ('memcpy', 'memset') GROUP BY ALL")
    assert {tuple(r[:4]): r[4] for r in got.itertuples(index=False)} == _kinds(timeline.events)


def test_what_tracer_writes_now_has_the_memory_kinds(tmp_path: Path) -> None:
    timeline = load_trace(DATA / "pair_kineto.json.gz", cache=False)
    write_timeline_parquet(timeline, tmp_path / "t.parquet")
    assert read_parquet_meta(tmp_path / "t.parquet")["schema_version"] == SCHEMA_VERSION >= 2
    assert pq.read_schema(tmp_path / "t.parquet").names[12:14] == ["src_mem", "dst_mem"]


def test_the_bundled_runs_written_before_still_load_with_the_kinds_of_their_traces() -> None:
    for run in sorted(p for p in EXAMPLES.iterdir() if (p / "timeline.parquet").exists()):
        if read_parquet_meta(run / "timeline.parquet").get("schema_version", 1) >= 2:
            continue
        trace = next(run / f for f in ("trace.json.gz", "report.sqlite.gz") if (run / f).exists())
        stored = load_trace(run).events
        parsed = load_trace(trace, cache=False).events
        for c in ("src_mem", "dst_mem"):
            assert stored[c].tolist() == parsed[c].tolist(), (run.name, c)


def test_tracer_sql_copies_and_memsets_views_have_the_kinds() -> None:
    run = EXAMPLES / "mlp-data-parallel-streams-20261202-162035"
    got = query(run, "SELECT direction, src_mem, dst_mem, count(*) AS n FROM copies GROUP BY ALL ORDER BY ALL")
    assert got.values.tolist() == [["DtoH", "device", "pageable", 128], ["HtoD", "pageable", "device", 108],
                                   ["HtoD", "pinned", "device", 120]]
    assert query(run, "SELECT dst_mem, count(*) AS n FROM memsets GROUP BY ALL").values.tolist() == [["device", 80]]
    # the trace itself, parsed and registered as a DataFrame, says the same
    again = query(run / "trace.json.gz", "SELECT direction, src_mem, dst_mem, count(*) AS n FROM copies "
                                          "GROUP BY ALL ORDER BY ALL")
    assert again.equals(got)


def test_chrome_export_read_back_keeps_the_kinds_through_the_names(tmp_path: Path) -> None:
    """Kineto's own names carry the kinds, so a Chrome export read back has them (args carry none)."""
    timeline = load_trace(DATA / "pair_kineto.json.gz", cache=False)
    out = export_timeline(timeline, tmp_path / "t.json").path
    back = parse_kineto_bytes(out.read_bytes(), str(out))
    assert _kinds(back.events) == _kinds(timeline.events)
    assert np.array_equal(np.sort(back.events["src_mem"].cat.codes), np.sort(timeline.events["src_mem"].cat.codes))
