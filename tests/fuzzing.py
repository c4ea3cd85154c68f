"""Seeded mutations of real traces, each run through ``tracer summary --json`` in a forked child.

Used by tests/test_fuzz.py (a fixed, small number of cases in CI) and bench/fuzz.py (the long run whose figures
docs/reliability.md records). Every case is judged the same way:

- exit 0: the JSON summary must be sane (no negative or overflowing figure, overlap within compute and copy,
  busy within the span), and for the mutations that must not change the figures (events shuffled or reversed,
  unknown keys added, whitespace, VACUUM, row order, triggers) the figures must equal the unmutated input's;
- exit 2: stderr is exactly one line, ``tracer: error: ...``;
- anything else (a traceback, another exit code, a warning on stderr, a hang, a crash) is a defect.

A case is (source file, mutation name, seed): the same triple always builds the same bytes.
"""

from __future__ import annotations

import gc
import gzip
import io
import json
import math
import os
import random
import select
import shutil
import signal
import sqlite3
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DATA = Path(__file__).parent / "data"

KINETO_SOURCES = [
    DATA / "pair_kineto.json.gz",
    DATA / "graph_kineto.json.gz",
    DATA / "external" / "HTA_mi250_minitoy_train_ROCm6_2_kineto.json.gz",
    DATA / "external" / "HTA_triton_example.json.gz",
    DATA / "external" / "HTA_cuda_event_sync_multi_stream_event_sync_trace.json.gz",
]
NSYS_SOURCES = [DATA / "pair.sqlite.gz", DATA / "graph_node.sqlite.gz", DATA / "nsys_compute_copy.sqlite.gz"]
RUN_DIR_SOURCES = sorted((Path(__file__).parent.parent / "tracer" / "examples").glob("*-16133*"))

#: Values a hostile or broken trace puts where a number (or a name) belongs.
HOSTILE_VALUES: list[Any] = [
    None, "", "abc", "12", "1e3", -1, -(2**40), 0, 1.5, -1e30, 1e30, 1e300, 2**63, 2**64 + 5, -(2**63) - 1,
    -1e15, 1.0e12,  # (µs: a time 31.9 years off, an 11.6-day duration: kept, and said in a note)
    True, [], {}, [1, 2], {"a": 1}, "NaN", "x" * 10_000, "<script>alert(1)</script>",
]
KINETO_FIELDS = ["ts", "dur", "pid", "tid", "name", "cat", "ph", "args.bytes", "args.stream", "args.device",
                 "args.correlation", "args.External id", "id", "args"]


@dataclass(frozen=True)
class Case:
    """One fuzz input: ``mutation`` applied to ``source`` with ``seed``."""

    source: Path
    klass: str  # "kineto", "nsys", "run-dir"
    mutation: str
    seed: int

    @property
    def label(self) -> str:
        return f"{self.source.name}:{self.mutation}:{self.seed}"


@dataclass
class Outcome:
    """How ``tracer summary --json`` took one case."""

    case: Case
    verdict: str  # "parsed", "refused", or "DEFECT: ..."
    rc: int | None
    stderr: str
    seconds: float
    rss_growth_mb: float

    @property
    def defect(self) -> bool:
        return self.verdict.startswith("DEFECT")


# ----- Kineto JSON mutations


def _load_json(path: Path) -> dict[str, Any]:
    with gzip.open(path, "rb") as f:
        return json.loads(f.read())


def _set_path(event: dict[str, Any], field: str, value: Any) -> None:
    if field.startswith("args."):
        args = event.get("args")
        if not isinstance(args, dict):
            args = event["args"] = {}
        args[field[5:]] = value
    else:
        event[field] = value


def _events(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in doc.get("traceEvents", []) if isinstance(e, dict)]


def _json_field(doc: dict[str, Any], rng: random.Random) -> bytes:
    for e in rng.sample(_events(doc), k=min(3, len(_events(doc)))):
        _set_path(e, rng.choice(KINETO_FIELDS), rng.choice(HOSTILE_VALUES))
    return json.dumps(doc).encode()


def _json_drop_key(doc: dict[str, Any], rng: random.Random) -> bytes:
    for e in rng.sample(_events(doc), k=min(5, len(_events(doc)))):
        if e:
            del e[rng.choice(sorted(e))]
    return json.dumps(doc).encode()


def _json_top_level(doc: dict[str, Any], rng: random.Random) -> bytes:
    choice = rng.randrange(6)
    if choice == 0:
        doc["traceEvents"] = rng.choice([{}, "events", 3, None])
    elif choice == 1:
        doc.pop("traceEvents", None)
    elif choice == 2:
        doc["deviceProperties"] = rng.choice([[{"id": "x"}], "gpu", [None], [{"id": 2**70, "name": 5}]])
    elif choice == 3:
        doc["distributedInfo"] = rng.choice([{"rank": "zero"}, {"rank": 2**70}, [], {"rank": -1}])
    elif choice == 4:
        doc["baseTimeNanoseconds"] = rng.choice(HOSTILE_VALUES)
    else:
        return b"[" + json.dumps(doc).encode() + b"]"
    return json.dumps(doc).encode()


def _json_duplicate_events_key(doc: dict[str, Any], rng: random.Random) -> bytes:
    text = json.dumps(doc)
    half = _events(doc)[: rng.randrange(1, max(2, len(_events(doc))))]
    return (text[:-1] + ', "traceEvents": ' + json.dumps(half) + "}").encode()


def _json_deep(doc: dict[str, Any], rng: random.Random) -> bytes:
    depth = rng.choice([200, 1_000, 5_000])
    text = json.dumps(doc)
    return (text[:-1] + ', "deep": ' + "[" * depth + "]" * depth + "}").encode()


def _json_bom(doc: dict[str, Any], rng: random.Random) -> bytes:
    return b"\xef\xbb\xbf" + json.dumps(doc).encode()


def _bytes_truncate(raw: bytes, rng: random.Random) -> bytes:
    return raw[: rng.randrange(0, len(raw))]


def _bytes_flip(raw: bytes, rng: random.Random) -> bytes:
    b = bytearray(raw)
    for _ in range(rng.choice([1, 4, 32])):
        b[rng.randrange(len(b))] = rng.randrange(256)
    return bytes(b)


def _bytes_splice(raw: bytes, rng: random.Random) -> bytes:
    i, j = sorted(rng.randrange(len(raw)) for _ in range(2))
    return raw[:i] + raw[j:] if rng.random() < 0.5 else raw[:j] + raw[i:j] + raw[j:]


# mutations that must leave every figure unchanged
def _same_shuffle(doc: dict[str, Any], rng: random.Random) -> bytes:
    rng.shuffle(doc["traceEvents"])
    return json.dumps(doc).encode()


def _same_reverse(doc: dict[str, Any], rng: random.Random) -> bytes:
    doc["traceEvents"].reverse()
    return json.dumps(doc).encode()


def _same_unknown_keys(doc: dict[str, Any], rng: random.Random) -> bytes:
    doc["someFutureField"] = {"version": 9, "list": [1, "a", None]}
    for e in _events(doc):
        e["zz_unknown"] = rng.choice([1, "x", None, [1], {"k": 2**70}])
    return json.dumps(doc).encode()


def _same_whitespace(doc: dict[str, Any], rng: random.Random) -> bytes:
    return json.dumps(doc, indent=rng.choice([1, 4])).encode()


JsonMutation = Callable[[dict[str, Any], random.Random], bytes]
BytesMutation = Callable[[bytes, random.Random], bytes]
KINETO_MUTATIONS: dict[str, JsonMutation | BytesMutation] = {
    "field": _json_field, "drop-key": _json_drop_key, "top-level": _json_top_level,
    "duplicate-traceEvents": _json_duplicate_events_key, "deep-nesting": _json_deep, "bom": _json_bom,
    "truncate": _bytes_truncate, "flip-bytes": _bytes_flip, "splice": _bytes_splice,
    "gz-truncate": _bytes_truncate, "gz-flip": _bytes_flip,
    "same:shuffle": _same_shuffle, "same:reverse": _same_reverse, "same:unknown-keys": _same_unknown_keys,
    "same:whitespace": _same_whitespace,
}
_BYTES_LEVEL = {"truncate", "flip-bytes", "splice"}
_GZ_LEVEL = {"gz-truncate", "gz-flip"}


def build_kineto(case: Case, out_dir: Path) -> Path:
    rng = random.Random(case.seed)
    mutate = KINETO_MUTATIONS[case.mutation]
    if case.mutation in _GZ_LEVEL:
        data = mutate(case.source.read_bytes(), rng)  # type: ignore[arg-type]  # (a bytes-level mutation)
        out = out_dir / "trace.json.gz"
        out.write_bytes(data)
        return out
    raw = gzip.decompress(case.source.read_bytes())
    if case.mutation in _BYTES_LEVEL:
        data = mutate(raw, rng)  # type: ignore[arg-type]  # (a bytes-level mutation)
    else:
        data = mutate(json.loads(raw), rng)
    out = out_dir / ("trace.json.gz" if rng.random() < 0.5 else "trace.json")
    out.write_bytes(gzip.compress(data, 1) if out.suffix == ".gz" else data)
    return out


# ----- nsys SQLite mutations

NSYS_TABLES = ["CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET",
               "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS", "StringIds", "TARGET_INFO_GPU",
               "TARGET_INFO_CUDA_DEVICE", "ThreadNames", "ENUM_CUDA_MEMCPY_OPER", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"]
SQL_VALUES: list[Any] = [None, 1e30, -1e30, 1e300, 1.5, -5, 2**63 - 1, -(2**63), "abc", "12", b"\xff\xfe\x00bin"]


def _tables(con: sqlite3.Connection) -> list[str]:
    return [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]


def _columns(con: sqlite3.Connection, table: str) -> list[str]:
    return [r[1] for r in con.execute(f'PRAGMA table_info("{table}")')]


def _present(con: sqlite3.Connection, rng: random.Random) -> str:
    tables = [t for t in NSYS_TABLES if t in _tables(con)]
    return rng.choice(tables)


def _sql_drop_column(con: sqlite3.Connection, rng: random.Random) -> None:
    table = _present(con, rng)
    cols = _columns(con, table)
    keep = [c for c in cols if c != rng.choice(cols)] or cols[:1]
    kept = ", ".join(f'"{c}"' for c in keep)
    con.execute(f'CREATE TABLE "_t" AS SELECT {kept} FROM "{table}"')
    con.execute(f'DROP TABLE "{table}"')
    con.execute(f'ALTER TABLE "_t" RENAME TO "{table}"')


def _sql_drop_table(con: sqlite3.Connection, rng: random.Random) -> None:
    con.execute(f'DROP TABLE "{_present(con, rng)}"')


def _sql_value(con: sqlite3.Connection, rng: random.Random) -> None:
    for _ in range(3):
        table = _present(con, rng)
        col = rng.choice(_columns(con, table))
        # nsys declares most columns NOT NULL INTEGER; SQLite's type affinity still stores what it is given
        # (a REAL 1e30, a TEXT) unless the table is STRICT, which nsys's are not
        value = rng.choice(SQL_VALUES)
        try:
            con.execute(f'UPDATE "{table}" SET "{col}" = ? WHERE rowid IN '
                        f'(SELECT rowid FROM "{table}" ORDER BY random() LIMIT {rng.choice([1, 3, 1000])})',
                        (value,))
        except sqlite3.IntegrityError:
            pass  # a NOT NULL column refuses NULL: the file could not hold that value anyway


def _sql_blob_string(con: sqlite3.Connection, rng: random.Random) -> None:
    con.execute("UPDATE StringIds SET value = ? WHERE id IN (SELECT id FROM StringIds ORDER BY random() LIMIT 3)",
                (b"\xff\xfe\x80 not utf-8",))


def _same_vacuum(con: sqlite3.Connection, rng: random.Random) -> None:
    con.execute("VACUUM")


def _same_row_order(con: sqlite3.Connection, rng: random.Random) -> None:
    table = _present(con, rng)
    con.execute(f'CREATE TABLE "_t" AS SELECT * FROM "{table}" ORDER BY random()')
    con.execute(f'DROP TABLE "{table}"')
    con.execute(f'ALTER TABLE "_t" RENAME TO "{table}"')


#: Bodies of a view put in place of a table (issue 38): a count without end, and a bounded but huge cross join.
_VIEW_BODIES = [
    "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) SELECT {cols} FROM r",
    "SELECT {cols} FROM (SELECT a.rowid AS x FROM sqlite_master a, sqlite_master b, sqlite_master c, "
    "sqlite_master d, sqlite_master e)",
]


def _sql_view(con: sqlite3.Connection, rng: random.Random) -> None:
    """A table the parser reads replaced by a view that runs (nearly) without end: refused, never a hang."""
    table = _present(con, rng)
    cols = ", ".join(f'x AS "{c}"' for c in _columns(con, table))
    con.execute(f'DROP TABLE "{table}"')
    con.execute(f'CREATE VIEW "{table}" AS ' + rng.choice(_VIEW_BODIES).format(cols=cols))


def _same_trigger(con: sqlite3.Connection, rng: random.Random) -> None:
    """Triggers that would run without end on a write: a read never runs them, the figures stay the same."""
    table = _present(con, rng)
    con.execute(f'CREATE TRIGGER "t_forever" AFTER INSERT ON "{table}" BEGIN '
                f'INSERT INTO "{table}" SELECT * FROM "{table}"; END')
    con.execute(f'CREATE TRIGGER "t_big" BEFORE UPDATE ON "{table}" BEGIN SELECT zeroblob(1000000000); END')


SQL_MUTATIONS: dict[str, Callable[[sqlite3.Connection, random.Random], None]] = {
    "drop-column": _sql_drop_column, "drop-table": _sql_drop_table, "value": _sql_value,
    "blob-string": _sql_blob_string, "same:vacuum": _same_vacuum, "same:row-order": _same_row_order,
    "view": _sql_view, "same:trigger": _same_trigger,
}
NSYS_FILE_MUTATIONS: dict[str, BytesMutation] = {"truncate": _bytes_truncate, "flip-bytes": _bytes_flip,
                                                "garbage-page": lambda raw, rng: _garbage_page(raw, rng)}
NSYS_MUTATIONS = [*SQL_MUTATIONS, *NSYS_FILE_MUTATIONS]


def _garbage_page(raw: bytes, rng: random.Random) -> bytes:
    page = int.from_bytes(raw[16:18], "big") or 65536
    n = max(1, len(raw) // page)
    i = rng.randrange(1, n) if n > 1 else 0
    return raw[: i * page] + bytes(rng.randrange(256) for _ in range(page)) + raw[(i + 1) * page:]


def build_nsys(case: Case, out_dir: Path) -> Path:
    rng = random.Random(case.seed)
    out = out_dir / "report.sqlite"
    out.write_bytes(gzip.decompress(case.source.read_bytes()))
    if case.mutation in SQL_MUTATIONS:
        con = sqlite3.connect(out, isolation_level=None)
        try:
            SQL_MUTATIONS[case.mutation](con, rng)
        finally:
            con.close()
    else:
        out.write_bytes(NSYS_FILE_MUTATIONS[case.mutation](out.read_bytes(), rng))
    return out


# ----- run directories (a recorded run: timeline.parquet, meta.json, summary.json and the trace)

RUN_DIR_MUTATIONS = ["parquet-flip", "parquet-truncate", "meta-garbage", "meta-hostile", "no-trace"]


def build_run_dir(case: Case, out_dir: Path) -> Path:
    rng = random.Random(case.seed)
    run = out_dir / case.source.name
    shutil.copytree(case.source, run)
    parquet = run / "timeline.parquet"
    if case.mutation == "parquet-flip":
        parquet.write_bytes(_bytes_flip(parquet.read_bytes(), rng))
    elif case.mutation == "parquet-truncate":
        parquet.write_bytes(_bytes_truncate(parquet.read_bytes(), rng))
    elif case.mutation == "meta-garbage":
        (run / "meta.json").write_bytes(_bytes_flip((run / "meta.json").read_bytes(), rng))
    elif case.mutation == "meta-hostile":
        (run / "meta.json").write_text(json.dumps(rng.choice([[], "x", {"scenario": {"a": 1}}, {"derived": 5}])))
    else:
        for p in run.iterdir():
            if p.name.startswith(("trace", "report")):
                p.unlink()
        parquet.unlink()
    return run


# ----- the cases, and judging one


#: (sources, class, its mutations)
PLANS: list[tuple[list[Path], str, list[str]]] = [
    (KINETO_SOURCES, "kineto", list(KINETO_MUTATIONS)),
    (NSYS_SOURCES, "nsys", NSYS_MUTATIONS),
    (RUN_DIR_SOURCES, "run-dir", RUN_DIR_MUTATIONS),
]


def cases(n: int, seed: int = 0) -> Iterator[Case]:
    """``n`` cases, spread round-robin over the input classes and their mutations (deterministic)."""
    rng = random.Random(seed)
    plans = PLANS
    weights = [6, 5, 1]  # the probe's proportions: most of the surface is in the two parsers
    schedule = [i for i, w in enumerate(weights) for _ in range(w)]
    for k in range(n):
        sources, klass, mutations = plans[schedule[k % len(schedule)]]
        mutation = mutations[(k // len(schedule)) % len(mutations)]
        yield Case(rng.choice(sources), klass, mutation, rng.randrange(2**31))


def covering_cases(rounds: int, seed: int = 0) -> Iterator[Case]:
    """Every mutation of every class ``rounds`` times, each time on a source and with a seed drawn from the
    seeded generator (deterministic): the fewest cases that try them all, ``rounds`` × 29."""
    rng = random.Random(seed)
    for _ in range(rounds):
        for sources, klass, mutations in PLANS:
            for mutation in mutations:
                yield Case(rng.choice(sources), klass, mutation, rng.randrange(2**31))


def build(case: Case, out_dir: Path) -> Path:
    builder = {"kineto": build_kineto, "nsys": build_nsys, "run-dir": build_run_dir}[case.klass]
    return builder(case, out_dir)


def _run_child(path: Path) -> tuple[int, str, str]:
    from tracer.cli import main

    # text streams over bytes, as sys.stdout is (the summary writes JSON bytes to sys.stdout.buffer)
    out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="replace", write_through=True)
    err = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="replace", write_through=True)
    with redirect_stdout(out), redirect_stderr(err):
        try:
            rc = main(["summary", str(path), "--json"])
        except BaseException as exc:  # noqa: BLE001 - what escapes main is exactly the defect looked for
            import traceback

            err.write("Traceback (escaped main):\n" + "".join(traceback.format_exception(exc)))
            rc = 99
    return rc, _text(out), _text(err)


def _text(stream: io.TextIOWrapper) -> str:
    stream.flush()
    return stream.buffer.getvalue().decode("utf-8", "replace")  # type: ignore[attr-defined]  # (over a BytesIO)


def run_case(case: Case, work: Path, *, timeout: float = 60.0, reference: dict | None = None) -> Outcome:
    """Build ``case`` under ``work`` and run ``tracer summary --json`` on it in a forked child."""
    case_dir = work / f"case-{case.seed}"
    case_dir.mkdir(parents=True, exist_ok=True)
    try:
        path = build(case, case_dir)
        return _judge(case, *_fork(path, timeout), reference=reference)
    finally:
        shutil.rmtree(case_dir, ignore_errors=True)


def _fork(path: Path, timeout: float) -> tuple[int | None, str, str, float, float]:
    base_kb = _rss_kb()  # the child starts with this resident (its peak can only be measured from here)
    r, w = os.pipe()
    t0 = time.perf_counter()
    gc.freeze()  # (the child's collections then skip the parent's objects: fewer of its pages copied on write)
    pid = os.fork()
    if pid == 0:  # the child: run, send (rc, stdout, stderr) as JSON, leave without cleanup handlers
        os.close(r)
        try:
            rc, out, err = _run_child(path)
            payload = json.dumps([rc, out, err]).encode()
        except BaseException as exc:  # noqa: BLE001
            payload = json.dumps([98, "", f"child failed: {exc!r}"]).encode()
        with os.fdopen(w, "wb") as f:
            f.write(payload)
        os._exit(0)
    gc.unfreeze()
    os.close(w)
    chunks: list[bytes] = []
    deadline = t0 + timeout
    with os.fdopen(r, "rb", buffering=0) as f:
        while True:
            left = deadline - time.perf_counter()
            if left <= 0:
                os.kill(pid, signal.SIGKILL)
                break
            ready, _, _ = select.select([f], [], [], left)
            if ready:
                chunk = f.read(1 << 20)
                if not chunk:
                    break
                chunks.append(chunk)
    _, status, usage = os.wait4(pid, 0)
    seconds = time.perf_counter() - t0
    growth_mb = max(0.0, (usage.ru_maxrss - base_kb) / 1024)
    if not chunks or seconds >= timeout:
        why = "timed out" if seconds >= timeout else f"child died (status {status})"
        return None, "", why, seconds, growth_mb
    rc, out, err = json.loads(b"".join(chunks))
    return rc, out, err, seconds, growth_mb


def _rss_kb() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024


_FIGURE_SUFFIXES = ("_ns", "bytes", "count", "kernels", "memcpys", "memsets", "events", "ops", "launches",
                    "gb_per_s", "idle_gaps")


def insane_figures(summary: Any, path: str = "") -> list[str]:
    """The figures of a ``summary --json`` document that no trace can produce (negative, overflowing, NaN,
    overlap beyond compute or copy, busy beyond the span)."""
    bad: list[str] = []
    if isinstance(summary, dict):
        for k, v in summary.items():
            where = f"{path}.{k}"
            if isinstance(v, (int, float)) and not isinstance(v, bool) and str(k).endswith(_FIGURE_SUFFIXES):
                if not math.isfinite(v) or v < 0 or v >= 2**63:
                    bad.append(f"{where}={v}")
            else:
                bad += insane_figures(v, where)
        devices = summary.get("devices") if path == "" else None
        for dev, d in (devices.items() if isinstance(devices, dict) else []):
            if isinstance(d, dict) and {"overlap_ns", "compute_ns", "copy_ns"} <= d.keys():
                if d["overlap_ns"] > min(d["compute_ns"], d["copy_ns"]):
                    bad.append(f"devices.{dev}: overlap beyond compute or copy")
                if "span_ns" in summary and d.get("busy_ns", 0) > summary["span_ns"]:
                    bad.append(f"devices.{dev}: busy beyond the span")
    elif isinstance(summary, list):
        for i, v in enumerate(summary):
            bad += insane_figures(v, f"{path}[{i}]")
    return bad


def figures(summary: dict[str, Any]) -> dict[str, Any]:
    """The parts of a summary that a figure-preserving mutation must leave exactly as they were."""
    return {k: summary.get(k) for k in ("devices", "lanes", "span_ns", "copies", "ranges", "concurrent_gpus_ns")}


def _judge(case: Case, rc: int | None, out: str, err: str, seconds: float, growth: float,
           *, reference: dict | None) -> Outcome:
    def outcome(verdict: str) -> Outcome:
        return Outcome(case, verdict, rc, err, seconds, growth)

    if rc is None:
        return outcome(f"DEFECT: {err}")
    if "Traceback" in err or "Warning" in err:
        return outcome("DEFECT: traceback or warning on stderr")
    if rc == 2:
        lines = err.strip().splitlines()
        if len(lines) != 1 or not lines[0].startswith("tracer: error: "):
            return outcome(f"DEFECT: exit 2 with {len(lines)} stderr lines")
        return outcome("refused")
    if rc != 0:
        return outcome(f"DEFECT: exit {rc}")
    try:
        summary = json.loads(out)
    except ValueError:
        return outcome("DEFECT: exit 0 without a JSON summary")
    bad = insane_figures(summary)
    if bad:
        return outcome(f"DEFECT: impossible figures {bad[:3]}")
    if case.mutation.startswith("same:") and reference is not None and figures(summary) != reference:
        return outcome("DEFECT: a figure-preserving mutation changed the figures")
    return outcome("parsed")


def reference_figures(source: Path, klass: str, work: Path) -> dict[str, Any] | None:
    """The figures of the unmutated ``source`` (what the ``same:`` mutations must reproduce)."""
    if klass == "run-dir":
        return None
    target = work / ("ref.json.gz" if klass == "kineto" else "ref.sqlite")
    target.write_bytes(source.read_bytes() if klass == "kineto" else gzip.decompress(source.read_bytes()))
    rc, out, err, _, _ = _fork(target, 120.0)
    target.unlink()
    if rc != 0:
        raise RuntimeError(f"the unmutated {source.name} does not parse: {err}")
    return figures(json.loads(out))


def warm_up(work: Path) -> None:
    """Import everything a summary needs in this process, once, so that each forked child starts warm (a
    child that imported pandas and the parsers itself would spend most of its time there)."""
    for source in (KINETO_SOURCES[0], NSYS_SOURCES[0]):
        target = work / ("warm.json.gz" if source.name.endswith(".json.gz") else "warm.sqlite")
        target.write_bytes(source.read_bytes() if target.suffix == ".gz" else gzip.decompress(source.read_bytes()))
        _run_child(target)
        target.unlink()


def run_all(n: int, work: Path, *, seed: int = 0, progress: Callable[[Outcome], None] | None = None) -> list[Outcome]:
    """Run ``n`` cases (:func:`cases`); the figures of each unmutated source are computed once and compared where
    due."""
    return run_cases(cases(n, seed), work, progress=progress)


def run_cases(chosen: Iterable[Case], work: Path, *,
              progress: Callable[[Outcome], None] | None = None) -> list[Outcome]:
    """Run the ``chosen`` cases, as :func:`run_all` runs its."""
    warm_up(work)
    refs: dict[Path, dict[str, Any] | None] = {}
    results = []
    for case in chosen:
        if case.mutation.startswith("same:") and case.source not in refs:
            refs[case.source] = reference_figures(case.source, case.klass, work)
        result = run_case(case, work, reference=refs.get(case.source))
        results.append(result)
        if progress:
            progress(result)
    return results


if __name__ == "__main__":  # a quick look: python tests/fuzzing.py N
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        for o in run_all(int(sys.argv[1]) if len(sys.argv) > 1 else 50, Path(d)):
            if o.defect or o.seconds > 5:
                print(f"{o.seconds:5.2f}s {o.rss_growth_mb:6.0f}MB", o.case.label, o.verdict, o.stderr.strip().splitlines()[-1:] if o.stderr else "")
