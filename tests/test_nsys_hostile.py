"""Hostile Nsight Systems exports (issue 14): every mutated copy of a real export in tests/data is either
summarised (exit 0, figures that are non-negative int64) or refused in exactly one stderr line (exit 2) —
never a traceback.

The mutations: drop each column the parser reads, drop each table it reads, put REAL / TEXT / BLOB / NULL /
out-of-range values into the time and size columns (one row, and every row), BLOBs and invalid UTF-8 into
StringIds, truncate the file at several offsets and overwrite pages with garbage. They used to end in a
pandas DatabaseError or UnicodeDecodeError traceback, or (a REAL start of 1e30) in
``compute_ns -9223372032604674900`` at exit 0.
"""

from __future__ import annotations

import gzip
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest

from tracer.cli import main
from tracer.errors import TracerError

DATA = Path(__file__).parent / "data"
SOURCES = {
    "compute_copy": DATA / "nsys_compute_copy.sqlite.gz",
    "pair": DATA / "pair.sqlite.gz",
    "extrap": DATA / "external" / "extrap_ex-gpu.s1000.sqlite.gz",
    "tracer_export": DATA / "two_streams.json.gz",  # exported here, for TRACER_EVENTS and TRACER_META
}

#: Every table and column tracer/parsers/nsys.py reads (the two name columns of kernels and both GPU-id
#: columns of TARGET_INFO are alternatives: dropping one is not damage).
READ: dict[str, tuple[str, ...]] = {
    "StringIds": ("id", "value"),
    "CUPTI_ACTIVITY_KIND_KERNEL": ("start", "end", "deviceId", "streamId", "correlationId", "globalPid",
                                   "demangledName", "shortName"),
    "CUPTI_ACTIVITY_KIND_MEMCPY": ("start", "end", "deviceId", "streamId", "correlationId", "globalPid", "bytes",
                                   "copyKind", "srcKind", "dstKind"),
    "CUPTI_ACTIVITY_KIND_MEMSET": ("start", "end", "deviceId", "streamId", "correlationId", "globalPid", "bytes",
                                   "memKind"),
    "CUPTI_ACTIVITY_KIND_RUNTIME": ("start", "end", "globalTid", "correlationId", "nameId", "eventClass"),
    "CUPTI_ACTIVITY_KIND_DRIVER": ("start", "end", "globalTid", "correlationId", "nameId", "eventClass"),
    "TRACER_EVENTS": ("start", "end", "kind", "copyKind", "nameId", "deviceId", "streamId", "pid", "tid", "rank",
                      "bytes", "correlationId", "srcMem", "dstMem"),
    "NVTX_EVENTS": ("start", "end", "eventType", "text", "textId", "globalTid"),
    "TARGET_INFO_GPU": ("id", "deviceId", "name"),
    "TARGET_INFO_CUDA_GPU": ("id", "deviceId", "name"),
    "ThreadNames": ("nameId", "globalTid"),
    "PROCESSES": ("globalPid", "pid", "name"),
    "TRACER_META": ("name", "value"),
    "TARGET_INFO_SESSION_START_TIME": ("utcEpochNs",),
    "META_DATA_EXPORT": ("name", "value"),
}
#: Columns whose values are times or sizes: a value that is not an int64 integer skips its row (counted).
NUMERIC = ("start", "end", "bytes", "deviceId", "streamId")
BAD_VALUES = {
    "real-1e30": "1e30",
    "real-1.5": "1.5",
    "text": "'abc'",
    "blob": "x'00ff'",
    "null": "NULL",
    "int64-max": str(2**63 - 1),
    "negative": "-5",
}

Mutation = Callable[[Path], None]


def _sql(*statements: str, table: str | None = None) -> Mutation:
    def apply(path: Path) -> None:
        con = sqlite3.connect(path)
        try:
            if table is not None:
                _loosen(con, table)
            for st in statements:
                con.execute(st)
            con.commit()
        finally:
            con.close()

    return apply


def _loosen(con: sqlite3.Connection, table: str) -> None:
    """Rebuild ``table`` without its NOT NULL and type constraints, as a damaged or hand-made file may be."""
    cols = [r[1] for r in con.execute(f'PRAGMA table_info("{table}")')]
    con.execute("PRAGMA legacy_alter_table = ON")
    con.execute(f'CREATE TABLE "_loose" AS SELECT * FROM "{table}"')
    con.execute(f'DROP TABLE "{table}"')
    con.execute(f'ALTER TABLE "_loose" RENAME TO "{table}"')
    assert [r[1] for r in con.execute(f'PRAGMA table_info("{table}")')] == cols


def _drop_column(table: str, column: str) -> Mutation:
    def apply(path: Path) -> None:
        con = sqlite3.connect(path)
        con.execute("PRAGMA legacy_alter_table = ON")  # views over the table (extrap's) are not rewritten
        try:
            try:
                con.execute(f'ALTER TABLE "{table}" DROP COLUMN "{column}"')
            except sqlite3.OperationalError:  # indexed or in a view: rebuild the table without it
                cols = [r[1] for r in con.execute(f'PRAGMA table_info("{table}")') if r[1] != column]
                quoted = ", ".join(f'"{c}"' for c in cols)
                con.execute("PRAGMA foreign_keys = OFF")
                con.execute(f'CREATE TABLE "_new" AS SELECT {quoted} FROM "{table}"')
                con.execute(f'DROP TABLE "{table}"')
                con.execute(f'ALTER TABLE "_new" RENAME TO "{table}"')
            con.commit()
        finally:
            con.close()

    return apply


def _truncate(fraction: float | int) -> Mutation:
    def apply(path: Path) -> None:
        size = path.stat().st_size
        with open(path, "r+b") as f:
            f.truncate(fraction if isinstance(fraction, int) else int(size * fraction))

    return apply


def _garbage_page(which: str) -> Mutation:
    def apply(path: Path) -> None:
        size = path.stat().st_size
        pages = size // 4096
        index = {"first": 0, "second": 1, "middle": pages // 2, "last": pages - 1}.get(which)
        rng = random.Random(f"{path.name}-{which}")
        with open(path, "r+b") as f:
            if index is None:  # "scattered": 16 bytes of garbage in every page after the header
                for p in range(1, pages):
                    f.seek(p * 4096 + rng.randrange(4096 - 16))
                    f.write(rng.randbytes(16))
            else:
                f.seek(index * 4096)
                f.write(rng.randbytes(4096))

    return apply


def _tables_and_columns(path: Path) -> dict[str, list[str]]:
    con = sqlite3.connect(path)
    try:
        names = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return {t: [r[1] for r in con.execute(f'PRAGMA table_info("{t}")')] for t in names}
    finally:
        con.close()


def mutations(path: Path, family: str) -> dict[str, Mutation]:
    """The mutations of one family that apply to the export at ``path``."""
    schema = _tables_and_columns(path)
    read = {t: [c for c in cols if c in schema[t]] for t, cols in READ.items() if t in schema}
    out: dict[str, Mutation] = {}
    if family == "drop-column":
        for t, cols in read.items():
            for c in cols:
                out[f"drop {t}.{c}"] = _drop_column(t, c)
    elif family == "drop-table":
        for t in read:
            out[f"drop {t}"] = _sql(f'DROP TABLE "{t}"')
    elif family == "values":
        for t, cols in read.items():
            for c in cols:
                if c not in NUMERIC:
                    continue
                for name, value in BAD_VALUES.items():
                    out[f"{t}.{c} one {name}"] = _sql(
                        f'UPDATE "{t}" SET "{c}" = {value} WHERE rowid = (SELECT MIN(rowid) FROM "{t}")', table=t
                    )
                out[f"{t}.{c} all text"] = _sql(f"UPDATE \"{t}\" SET \"{c}\" = 'abc'", table=t)
                out[f"{t}.{c} all real"] = _sql(f'UPDATE "{t}" SET "{c}" = 1e30', table=t)
        if "StringIds" in read:
            out["StringIds.value blob"] = _sql("UPDATE StringIds SET value = x'ff00fe' WHERE id % 3 = 0", table="StringIds")
            out["StringIds.value not utf-8"] = _sql("UPDATE StringIds SET value = CAST(x'ff41fe' AS TEXT)", table="StringIds")
            out["StringIds.id text"] = _sql("UPDATE StringIds SET id = 'x' || id WHERE id % 2 = 0", table="StringIds")
        for t in ("TARGET_INFO_GPU", "PROCESSES", "ThreadNames"):
            if t in read:
                col = read[t][0]
                out[f"{t}.{col} blob"] = _sql(f"UPDATE \"{t}\" SET \"{col}\" = x'ff'", table=t)
        if "TRACER_META" in read:
            out["TRACER_META.value garbage"] = _sql("UPDATE TRACER_META SET value = '{not json'", table="TRACER_META")
        if "TRACER_EVENTS" in read:
            out["TRACER_EVENTS.kind unknown"] = _sql("UPDATE TRACER_EVENTS SET kind = 'bogus' WHERE rowid % 2 = 0", table="TRACER_EVENTS")
    elif family == "truncate":
        for cut in (0, 100, 1024, 4096, 0.1, 0.5, 0.9):
            out[f"truncate {cut}"] = _truncate(cut)
        size = path.stat().st_size
        out["truncate size-1"] = _truncate(size - 1)
        out["truncate size-4096"] = _truncate(size - 4096)
    elif family == "garbage":
        for which in ("first", "second", "middle", "last", "scattered"):
            out[f"garbage {which} page"] = _garbage_page(which)
    return out


FAMILIES = ("drop-column", "drop-table", "values", "truncate", "garbage")


@pytest.fixture(scope="module")
def exports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The real exports, unpacked (and one written by ``tracer export``) once for the module."""
    folder = tmp_path_factory.mktemp("exports")
    out = {}
    for name, src in SOURCES.items():
        dest = folder / f"{name}.sqlite"
        if name == "tracer_export":
            assert main(["export", str(src), "-o", str(dest)]) == 0
        else:
            with gzip.open(src, "rb") as f, open(dest, "wb") as g:
                shutil.copyfileobj(f, g)
        out[name] = dest
    return out


def _sane(value: object, key: str = "") -> list[str]:
    """Figures that are negative or beyond int64, as "key=value" strings."""
    if isinstance(value, dict):
        return [bad for k, v in value.items() for bad in _sane(v, str(k))]
    if isinstance(value, list):
        return [bad for v in value for bad in _sane(v, key)]
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if (key.endswith(("_ns", "_frac", "bytes", "kernels", "memcpys", "events")) and value < 0) or abs(value) >= 2**63:
            return [f"{key}={value}"]
    return []


def check(path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[str, str]:
    """Summarise ``path`` in-process: ("ok" | "refused" | "skipped rows", detail), or ("BAD", why)."""
    capsys.readouterr()
    try:
        rc = main(["summary", "--json", "--no-cache", str(path)])
    except BaseException as exc:  # noqa: BLE001 - that is the bug being looked for
        return "BAD", f"{type(exc).__name__}: {exc}"
    out, err = capsys.readouterr()
    lines = err.splitlines()
    if "Traceback" in err:
        return "BAD", f"a traceback on stderr: {err[-300:]}"
    if rc == 2:
        if len(lines) != 1 or not lines[0].startswith("tracer: error: "):
            return "BAD", f"exit 2 with stderr {err!r}"
        return "refused", lines[0]
    if rc != 0:
        return "BAD", f"exit {rc}, stderr {err!r}"
    if any(not line.startswith(("tracer: warning: ", "tracer: note: ")) for line in lines):
        return "BAD", f"exit 0 with stderr {err!r}"
    insane = _sane(orjson.loads(out))
    if insane:
        return "BAD", f"exit 0 with figures {insane[:5]}"
    return ("skipped rows" if lines else "ok"), err.strip()


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("source", list(SOURCES))
def test_a_mutated_export_is_summarised_or_refused_in_one_line(
    exports: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str], source: str, family: str
) -> None:
    if source == "pair" and family in ("drop-column", "values"):
        pytest.skip("the same schema as compute_copy's: only its bytes differ (truncate, garbage)")
    outcomes: Counter[str] = Counter()
    bad = []
    for name, mutate in mutations(exports[source], family).items():
        path = tmp_path / f"{source}.sqlite"
        shutil.copyfile(exports[source], path)
        mutate(path)
        outcome, detail = check(path, capsys)
        outcomes[outcome] += 1
        if outcome == "BAD":
            bad.append(f"{name}: {detail}")
        path.unlink()
    assert not bad, "\n".join(bad)
    assert sum(outcomes.values()) > 0
    with capsys.disabled():
        print(f"\n  {source} {family}: {dict(outcomes)}", end="")


def test_a_real_1e30_start_is_a_skipped_row_not_a_negative_figure(
    exports: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # regression: a REAL start of 1e30 cast to int64 gave compute_ns -9223372032604674900 at exit 0
    path = tmp_path / "x.sqlite"
    shutil.copyfile(exports["compute_copy"], path)
    _sql("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = 1e30 WHERE rowid = (SELECT MIN(rowid) FROM "
         "CUPTI_ACTIVITY_KIND_KERNEL)", table="CUPTI_ACTIVITY_KIND_KERNEL")(path)
    assert main(["summary", "--json", "--no-cache", str(path)]) == 0
    out, err = capsys.readouterr()
    result = orjson.loads(out)
    assert result["meta"]["skipped"] == {"kernel start not an integer in range": 1}
    assert err == f"tracer: warning: {path}: 1 event skipped: kernel start not an integer in range\n"
    assert result["devices"]["0"]["kernels"] == 10  # of the export's 11
    assert main(["summary", "--strict", str(path)]) == 2
    assert capsys.readouterr().err == (
        f"tracer: error: {path}: 1 event skipped: kernel start not an integer in range (--strict)\n"
    )


def test_a_column_no_row_can_use_is_one_error(exports: dict[str, Path], tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "x.sqlite"
    shutil.copyfile(exports["compute_copy"], path)
    _sql("UPDATE CUPTI_ACTIVITY_KIND_MEMCPY SET bytes = 'many'", table="CUPTI_ACTIVITY_KIND_MEMCPY")(path)
    assert main(["summary", str(path)]) == 2
    assert capsys.readouterr().err == (
        f"tracer: error: {path}: damaged Nsight Systems export: unexpected values in "
        "CUPTI_ACTIVITY_KIND_MEMCPY.bytes: none of its 10 rows holds a usable integer\n"
    )


def test_a_missing_column_is_named(exports: dict[str, Path], tmp_path: Path,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    # used to be pandas' "Execution failed on sql 'SELECT ...': no such column: deviceId" traceback
    path = tmp_path / "x.sqlite"
    shutil.copyfile(exports["compute_copy"], path)
    _drop_column("CUPTI_ACTIVITY_KIND_KERNEL", "deviceId")(path)
    assert main(["summary", str(path)]) == 2
    assert capsys.readouterr().err == (
        f"tracer: error: {path}: damaged Nsight Systems export: table CUPTI_ACTIVITY_KIND_KERNEL has no column "
        "deviceId\n"
    )


def test_a_blob_in_string_ids_reads_with_replacement_characters(exports: dict[str, Path], tmp_path: Path) -> None:
    # used to be a UnicodeDecodeError traceback
    from tracer.parsers import load_trace

    path = tmp_path / "x.sqlite"
    shutil.copyfile(exports["compute_copy"], path)
    _sql("UPDATE StringIds SET value = x'ff41' || CAST(value AS BLOB)", table="StringIds")(path)
    names = load_trace(path).events["name"].astype(str)
    assert names.str.startswith("\ufffdA").sum() > 1000


@pytest.mark.parametrize("mutation", ["garbage second page", "drop CUPTI_ACTIVITY_KIND_KERNEL.start"])
def test_the_real_stderr_is_one_line(exports: dict[str, Path], tmp_path: Path, mutation: str) -> None:
    path = tmp_path / "x.sqlite"
    shutil.copyfile(exports["compute_copy"], path)
    family = "garbage" if mutation.startswith("garbage") else "drop-column"
    mutations(path, family)[mutation](path)
    proc = subprocess.run([sys.executable, "-m", "tracer", "summary", str(path)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.splitlines()) == 1, proc.stderr
    assert proc.stderr.startswith(f"tracer: error: {path}: ")
    assert "damaged Nsight Systems export" in proc.stderr or "not a readable SQLite file" in proc.stderr


# ----- issue 38.1: a file whose schema would run a query of its own (a view that never ends) never hangs the parser

#: Nsight's kernel table replaced by a view that counts without end (the 323 KB file that hung the parser and,
#: uploaded nine times, every thread of the dashboard).
RECURSIVE = "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) SELECT {cols} FROM r"


def _as_view(table: str, body: str = RECURSIVE) -> Mutation:
    def apply(path: Path) -> None:
        con = sqlite3.connect(path)
        try:
            cols = ", ".join(f'x AS "{c}"' for c in (r[1] for r in con.execute(f'PRAGMA table_info("{table}")')))
            con.execute(f'DROP TABLE "{table}"')
            con.execute(f'CREATE VIEW "{table}" AS ' + body.format(cols=cols))
            con.commit()
        finally:
            con.close()

    return apply


@pytest.mark.parametrize("table", ["CUPTI_ACTIVITY_KIND_KERNEL", "StringIds", "TARGET_INFO_CUDA_STREAM"])
def test_a_recursive_view_in_place_of_a_table_is_refused_at_once(
    exports: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str], table: str
) -> None:
    path = tmp_path / "view.sqlite"
    shutil.copyfile(exports["pair"], path)
    _as_view(table)(path)
    t0 = time.monotonic()
    outcome, line = check(path, capsys)
    assert time.monotonic() - t0 < 5
    assert (outcome, line) == ("refused", f"tracer: error: {path}: refused: {table} is a view, not a table as nsys "
                               "writes it (reading it would run a query of the file's own, which may never end)")


def test_a_generated_column_is_refused_and_other_views_are_never_read(
    exports: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "gen.sqlite"
    shutil.copyfile(exports["pair"], path)
    # a column computed on every read: 60 MB per row, from 323 KB
    _sql('ALTER TABLE StringIds ADD COLUMN big AS (zeroblob(60000000))')(path)
    assert check(path, capsys)[1].endswith("refused: StringIds is a table with generated columns, not a table as "
                                           "nsys writes it (reading it would run a query of the file's own, which "
                                           "may never end)")
    # a view of a name tracer does not read (extrap adds five) is left alone, however it would run
    shutil.copyfile(exports["pair"], path)
    _sql("CREATE VIEW EXTRA_FOREVER AS " + RECURSIVE.format(cols="x"))(path)
    assert check(path, capsys)[0] == "ok"


def test_triggers_never_run_on_a_read(exports: dict[str, Path], tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    # SQLite runs a trigger on a write only, and the file is opened read-only and query_only: a trigger that
    # would insert without end is harmless, and the figures are the untouched file's
    path = tmp_path / "trig.sqlite"
    shutil.copyfile(exports["pair"], path)
    want = check(path, capsys)
    _sql("PRAGMA recursive_triggers = ON",
         "CREATE TRIGGER forever AFTER INSERT ON StringIds BEGIN INSERT INTO StringIds (value) VALUES (NEW.value); END",
         "CREATE TRIGGER forever2 BEFORE DELETE ON CUPTI_ACTIVITY_KIND_KERNEL BEGIN SELECT zeroblob(1000000000); END",
         )(path)
    assert check(path, capsys) == want


_LOOPING_CHILD = """
import sys
import tracer.parsers.nsys as nsys

def every_name(con):  # the view check taken away: what is left to stop the view is the progress handler
    print("reading", file=sys.stderr, flush=True)
    return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}

nsys._tables = every_name
from tracer.cli import main
sys.exit(main(["summary", "--no-cache", sys.argv[1]]))
"""


@pytest.fixture
def endless(exports: dict[str, Path], tmp_path: Path) -> Path:
    path = tmp_path / "view.sqlite"
    shutil.copyfile(exports["pair"], path)
    _as_view("CUPTI_ACTIVITY_KIND_KERNEL")(path)
    return path


def test_a_read_past_its_time_budget_is_refused(endless: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tracer.parsers import load_trace, nsys

    monkeypatch.setattr(nsys, "_tables", lambda con: {r[0] for r in con.execute(
        "SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")})
    monkeypatch.setenv("TRACER_SQLITE_MAX_SECONDS", "0.5")
    t0 = time.monotonic()
    with pytest.raises(TracerError, match=r"took longer than 0.5 s: refused") as info:
        load_trace(endless, cache=False)
    assert time.monotonic() - t0 < 3
    assert str(info.value).startswith(f"{endless}: reading this SQLite file took longer than 0.5 s")


@pytest.mark.slow  # (a process started)
@pytest.mark.parametrize("sig, rc, said", [(signal.SIGINT, 130, "tracer: interrupted\n"),
                                           (signal.SIGTERM, 143, "tracer: terminated (SIGTERM)\n")])
def test_ctrl_c_stops_a_read_that_would_never_end(endless: Path, sig: int, rc: int, said: str) -> None:
    # SQLite's own loop gives Python no chance to raise KeyboardInterrupt: only the progress handler does
    proc = subprocess.Popen([sys.executable, "-c", _LOOPING_CHILD, str(endless)], stderr=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, text=True)
    assert proc.stderr is not None
    try:
        assert proc.stderr.readline() == "reading\n"
        time.sleep(0.3)
        t0 = time.monotonic()
        proc.send_signal(sig)
        got = proc.wait(timeout=20)
        stopped_s = time.monotonic() - t0
    finally:
        proc.kill()
    assert (got, proc.stderr.read()) == (rc, said)
    assert stopped_s < 5


def test_every_table_the_parser_reads_is_checked_for_a_view() -> None:
    # a table read but missing from READ_TABLES would still never be read as a view (only plain tables are
    # read), but a view in its place would make it silently absent instead of refused
    import re

    from tracer.parsers import nsys

    named = set(re.findall(r'"((?:CUPTI_|NVTX_|TARGET_INFO_|TRACER_|META_DATA_)[A-Z_]+|StringIds|ThreadNames|'
                           r'PROCESSES)"', Path(nsys.__file__).read_text()))
    assert named | set(READ) <= nsys.READ_TABLES, sorted((named | set(READ)) - nsys.READ_TABLES)


# ----- issue 38.4: no library's warning for an id no export holds (a correlation id of 1e300, 2**63 - 1)


@pytest.mark.parametrize("table, column, value", [
    ("CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "correlationId", "1e300"),  # numpy's "invalid value encountered in cast"
    ("CUPTI_ACTIVITY_KIND_KERNEL", "correlationId", str(2**63 - 1)),  # the same, then "cannot safely cast": exit 2
    ("CUPTI_ACTIVITY_KIND_RUNTIME", "globalTid", str(2**63 - 1)),
    ("TARGET_INFO_GPU", "id", "1e300"),  # tracer explain's launch figures: a TypeError traceback
])
def test_an_id_past_what_an_export_holds_is_missing_without_a_warning(
    exports: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str], recwarn: pytest.WarningsRecorder,
    table: str, column: str, value: str,
) -> None:
    path = tmp_path / "x.sqlite"
    shutil.copyfile(exports["pair"], path)
    _sql(f'UPDATE "{table}" SET "{column}" = {value} WHERE rowid = (SELECT MIN(rowid) FROM "{table}")',
         f'UPDATE "{table}" SET "{column}" = NULL WHERE rowid = (SELECT MAX(rowid) FROM "{table}")', table=table)(path)
    assert check(path, capsys)[0] == "ok"
    assert main(["explain", str(path)]) == 0
    assert "Warning" not in capsys.readouterr().err
    assert [str(w.message) for w in recwarn] == []
