"""tracer sql and tracer.sql: the views against the pandas timeline, every query of docs/sql.md against its shown
output, and the read-only promise (nothing a query says changes a run or reaches the file system).

``python tests/test_sql.py`` rewrites the outputs in docs/sql.md from the queries there.
"""

from __future__ import annotations

import hashlib
import io
import re
import subprocess
import sys
from pathlib import Path

import pytest

duckdb = pytest.importorskip("duckdb")

import tracer.cli.sql  # noqa: E402,F401  (registers the command; the integrator lists it in tracer.cli)
from tracer.cli import main  # noqa: E402
from tracer.cli.sql import _statements, table_text  # noqa: E402
from tracer.errors import TracerError  # noqa: E402
from tracer.parsers import load_trace  # noqa: E402
from tracer.sql.session import Session, SqlError, query  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RUN_NAME = "tracer/examples/mlp-data-parallel-streams-20261202-162035"
RUN = ROOT / RUN_NAME
DOC = ROOT / "docs" / "sql.md"
BLOCK = re.compile(r"```sql\n(.*?)```\n\n```text\n(.*?)```", re.DOTALL)
CLI = "import tracer.cli.sql, sys; from tracer.cli import main; sys.exit(main(sys.argv[1:]))"


def doc_queries() -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2)) for m in BLOCK.finditer(DOC.read_text())]


def rendered(session: Session, sql: str) -> str:
    names, types, rows = session.rows(sql)
    return table_text(names, types, list(rows), width=100)


def run_files(run: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(run.iterdir()) if p.is_file()}


@pytest.fixture(scope="module")
def session():
    with Session(RUN) as s:
        yield s


@pytest.fixture(scope="module")
def events():
    return load_trace(RUN).events


# -- docs/sql.md ---------------------------------------------------------------------------------------------

def test_doc_has_a_dozen_queries():
    assert len(doc_queries()) >= 12


@pytest.mark.parametrize("i", range(len(doc_queries())))
def test_doc_query_output_is_what_the_doc_shows(i):
    sql, shown = doc_queries()[i]
    with Session(RUN) as s:
        assert rendered(s, sql) == shown, f"docs/sql.md query {i + 1} gives other output: python tests/test_sql.py"


def test_doc_key_figures_equal_the_analysis(session, events):
    """Independently of the doc's text: the figures its queries compute equal tracer's own analysis."""
    from tracer.analysis.summary import summarize
    from tracer.analysis.work import copy_summary, idle_gaps, kernel_summary
    from tracer.parsers import load_trace

    summary = summarize(load_trace(RUN))
    lanes = session.query("SELECT device, stream, kernels, memcpys, memsets, busy_ns FROM lanes ORDER BY 1, 2")
    assert lanes.to_dict("records") == summary["lanes"]
    ranges = session.query(
        "SELECT name, count(*) AS count, sum(dur_ns)::BIGINT AS host_ns, sum(gpu_busy_ns)::BIGINT AS gpu_busy_ns, "
        "sum(gpu_window_ns)::BIGINT AS gpu_window_ns, sum(kernels)::BIGINT AS kernels, "
        "sum(memcpys)::BIGINT AS memcpys, sum(memsets)::BIGINT AS memsets FROM range_gpu GROUP BY name"
    ).set_index("name")
    for r in summary["ranges"]:
        got = ranges.loc[r["name"]].to_dict()
        assert got == {k: r[k] for k in got}, r["name"]
    top = kernel_summary(events).head(6)
    got = session.query("SELECT name, count(*) AS n, sum(dur_ns)::BIGINT AS t FROM kernels GROUP BY name "
                        "ORDER BY t DESC, name LIMIT 6")
    assert got["name"].tolist() == top["name"].tolist()
    assert got["t"].tolist() == top["total_ns"].tolist()
    cs = copy_summary(events)
    got = session.query("SELECT direction, sum(bytes)::BIGINT AS b, sum(dur_ns)::BIGINT AS t FROM copies "
                        "GROUP BY direction ORDER BY direction")
    assert got["b"].tolist() == cs.sort_values("copy_kind")["bytes"].tolist()
    assert got["t"].tolist() == cs.sort_values("copy_kind")["total_ns"].tolist()
    gap_sql = next(sql for sql, _ in doc_queries() if "idle" in sql or "busy_until" in sql).replace("LIMIT 8", "")
    gaps = session.query(gap_sql)
    expected = idle_gaps(events, 0, 1_000_001)
    assert sorted(gaps["gap_ns"].tolist()) == sorted(expected["gap_ns"].tolist())


def test_doc_unhidden_copies_query_agrees_with_pandas_on_a_run_that_hides_copies():
    """The "which copies did no kernel hide" query on the side-stream run, against an overlap test written here."""
    import numpy as np

    run = ROOT / "tracer/examples/compute-copy-side-stream-streams-20261202-161322"
    sql = next(sql for sql, _ in doc_queries() if "AS hidden" in sql)
    got = query(run, sql)
    ev = load_trace(run).events
    k = ev[(ev["kind"] == "kernel") & (ev["device"] >= 0)]
    c = ev[(ev["kind"] == "memcpy") & (ev["device"] >= 0)]
    hidden = np.array([
        bool(((k["device"] == d) & (k["start_ns"] < e) & (k["end_ns"] > s)).any())
        for d, s, e in zip(c["device"], c["start_ns"], c["end_ns"])
    ])
    assert got["copies"].tolist() == [len(c)] == [50]
    assert got["not_hidden"].tolist() == [int((~hidden).sum())] == [1]
    assert got["not_hidden_ns"].tolist() == [int((c["end_ns"] - c["start_ns"])[~hidden].sum())]


# -- the views against the pandas timeline -------------------------------------------------------------------

def test_counts_and_sums_equal_the_pandas_timeline(session, events):
    gpu = events["device"] >= 0
    n = session.query("SELECT (SELECT count(*) FROM events) e, (SELECT count(*) FROM kernels) k, "
                      "(SELECT count(*) FROM copies) c, (SELECT count(*) FROM memsets) m, "
                      "(SELECT count(*) FROM ranges) r, (SELECT sum(bytes)::BIGINT FROM copies) b, "
                      "(SELECT sum(dur_ns)::BIGINT FROM kernels) t").iloc[0]
    kernels = events[(events["kind"] == "kernel") & gpu]
    copies = events[(events["kind"] == "memcpy") & gpu]
    assert n["e"] == len(events) == 15936
    assert n["k"] == len(kernels) == 1620
    assert n["c"] == len(copies) == 356
    assert n["m"] == ((events["kind"] == "memset") & gpu).sum()
    assert n["r"] == (events["kind"] == "range").sum()
    assert n["b"] == int(copies["bytes"].sum())
    assert n["t"] == int((kernels["end_ns"] - kernels["start_ns"]).sum())


def test_a_parsed_trace_and_its_parquet_give_the_same_events(tmp_path):
    """trace.json.gz is parsed and registered as a DataFrame; timeline.parquet is scanned in place: same rows."""
    sql = "SELECT kind, count(*) AS n, sum(dur_ns)::BIGINT AS t, sum(bytes)::BIGINT AS b FROM events GROUP BY kind ORDER BY kind"
    a = query(RUN, sql)
    b = query(RUN / "trace.json.gz", sql)
    assert a.equals(b)


def test_a_timeline_object_and_rank_and_source(events):
    tl = load_trace(RUN)
    got = query(tl, "SELECT DISTINCT source, rank FROM events")
    assert got.to_dict("records") == [{"source": str(RUN), "rank": 0}]


def test_several_targets_are_one_events_view_with_a_source_column():
    other = ROOT / "tracer/examples/multi-device-streams-20261202-161153"
    got = query([RUN, other], "SELECT source, count(*) AS k FROM kernels GROUP BY source ORDER BY source")
    assert got.to_dict("records") == [{"source": str(RUN), "k": 1620}, {"source": str(other), "k": 200}]
    lanes = query([RUN, other], "SELECT source, count(*) AS n FROM lanes GROUP BY source ORDER BY source")
    assert lanes["n"].tolist() == [3, 2]


def test_session_close_is_safe_twice():
    s = Session(RUN)
    s.close()
    s.close()


# -- read-only -----------------------------------------------------------------------------------------------

WRITES = [
    "COPY kernels TO '{tmp}/k.csv'",
    "COPY (SELECT 1 AS a) TO '{run}/timeline.parquet' (FORMAT parquet, USE_TMP_FILE false)",
    "EXPLAIN ANALYZE COPY (SELECT 1 AS a) TO '{run}/timeline.parquet' (FORMAT csv, USE_TMP_FILE false)",
    "ATTACH '{tmp}/x.duckdb' AS x",
    "ATTACH '{tmp}/x.duckdb' AS x; CREATE TABLE x.t AS SELECT * FROM kernels",
    "CREATE TABLE t AS SELECT * FROM kernels",
    "EXPORT DATABASE '{tmp}/export'",
    "INSTALL httpfs",
    "LOAD httpfs",
    "SET enable_external_access = true",
    "DROP VIEW kernels",
    "SELECT 1; COPY kernels TO '{tmp}/k.csv'",
]


@pytest.mark.parametrize("sql", WRITES)
def test_a_write_is_refused_in_one_line(sql, tmp_path, capsys):
    before = run_files(RUN)
    rc = main(["sql", str(RUN), "-q", sql.format(tmp=tmp_path, run=RUN)])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.count("\n") == 1 and err.startswith("tracer: error: query: refused: tracer sql only reads")
    assert list(tmp_path.iterdir()) == []
    assert run_files(RUN) == before


def test_a_with_that_writes_is_named_for_what_it_does(capsys):
    # was "WITH is not a reading statement; use SELECT, WITH, ...": the refusal contradicted itself
    rc = main(["sql", str(RUN), "-q", "WITH x AS (SELECT 1) DELETE FROM kernels"])
    assert rc == 2
    assert "and WITH ... DELETE is not a reading statement" in capsys.readouterr().err


@pytest.mark.parametrize(
    "sql",
    ["SELECT * FROM read_csv('/etc/passwd')", "SELECT * FROM '{run}/timeline.parquet'",
     "SELECT * FROM read_parquet('{run}/timeline.parquet')", "SELECT * FROM read_text('{run}/meta.json')"],
)
def test_the_file_system_is_out_of_reach(sql, capsys):
    rc = main(["sql", str(RUN), "-q", sql.format(run=RUN)])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1
    assert "disabled by configuration" in err or "does not exist" in err


def test_every_doc_query_leaves_the_run_byte_identical():
    before = run_files(RUN)
    with Session(RUN) as s:
        for sql, _ in doc_queries():
            s.query(sql)
    assert run_files(RUN) == before


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        ("SELEC 1", 'tracer: error: query: Parser Error: syntax error at or near "SELEC"\n'),
        ("SELECT * FROM kernel", 'tracer: error: query: Catalog Error: Table with name kernel does not exist! '
                                 'Did you mean "kernels"?\n'),
        ("SELECT nope FROM kernels", None),
    ],
)
def test_bad_sql_is_one_line_exit_2(sql, message, capsys):
    rc = main(["sql", str(RUN), sql])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.count("\n") == 1 and err.startswith("tracer: error: query: ")
    if message:
        assert err == message


def test_the_api_raises_sql_error():
    with pytest.raises(SqlError, match="^query: Parser Error"):
        query(RUN, "SELEC 1")
    with pytest.raises(SqlError, match="refused"):
        query(RUN, "COPY kernels TO 'x.csv'")
    assert issubclass(SqlError, TracerError)


def test_missing_target_and_missing_query_target(capsys):
    assert main(["sql", "no/such/run", "SELECT 1"]) == 2
    assert capsys.readouterr().err == "tracer: error: no/such/run: no such file or directory\n"
    assert main(["sql", "SELECT 1"]) == 2
    assert "no TARGET" in capsys.readouterr().err


# -- output formats and the prompt ---------------------------------------------------------------------------

def test_csv_and_json(capsys):
    sql = "SELECT device, stream, busy_ns FROM lanes ORDER BY stream"
    assert main(["sql", str(RUN), "-q", sql, "--format", "csv"]) == 0
    assert capsys.readouterr().out == "device,stream,busy_ns\n0,7,16132322\n0,13,259310652\n0,17,20396986\n"
    assert main(["sql", str(RUN), sql, "--format", "json"]) == 0
    assert capsys.readouterr().out == (
        '[{"device":0,"stream":7,"busy_ns":16132322},{"device":0,"stream":13,"busy_ns":259310652},'
        '{"device":0,"stream":17,"busy_ns":20396986}]\n'
    )


def test_table_rows_are_capped(capsys):
    assert main(["sql", str(RUN), "SELECT stream FROM kernels", "--max-rows", "3"]) == 0
    captured = capsys.readouterr()
    assert captured.out.count(" 13 ") == 3
    assert captured.err == "tracer: note: 3 of 1,620 rows shown; --max-rows N or --format csv for all\n"


def test_prompt_reads_statements_from_stdin(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    script = "SELECT count(*) AS n\n  FROM kernels;\n.tables\n.schema lanes\n.format csv\nSELECT 1 AS a; SELECT 2 AS b;\n"
    monkeypatch.setattr(sys, "stdin", io.StringIO(script))
    assert main(["sql", str(RUN)]) == 0
    out = capsys.readouterr().out
    assert "1620" in out and "range_gpu" in out and "busy_ns" in out
    assert out.endswith("a\n1\nb\n2\n")


def test_prompt_goes_on_after_an_error_and_exits_2_for_a_script(monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdin", io.StringIO("SELEC 1;\nSELECT 42 AS answer"))
    assert main(["sql", str(RUN)]) == 2
    captured = capsys.readouterr()
    assert captured.err == 'tracer: error: query: Parser Error: syntax error at or near "SELEC"\n'
    assert "42" in captured.out


def test_statements_are_split_at_line_ends_with_a_semicolon():
    lines = ["", ".tables", "SELECT 1,", "2;", None, "SELECT 'dropped'", None, "SELECT 3"]
    assert list(_statements(lines, lambda s: s.startswith("."))) == [".tables", "SELECT 1,\n2;", "SELECT 3"]


@pytest.mark.slow
def test_the_command_as_a_process(tmp_path):
    before = run_files(RUN)
    proc = subprocess.run([sys.executable, "-c", CLI, "sql", str(RUN), "SELECT count(*) AS n FROM copies",
                           "--format", "csv"], capture_output=True, text=True, cwd=tmp_path)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "n\n356\n", "")
    proc = subprocess.run([sys.executable, "-c", CLI, "sql", str(RUN)], input="COPY kernels TO 'k.csv';\n",
                          capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "refused" in proc.stderr
    assert list(tmp_path.iterdir()) == [] and run_files(RUN) == before


def regenerate() -> None:
    """Rewrite each output block of docs/sql.md with what its query gives now."""
    text = DOC.read_text()
    with Session(RUN) as s:
        text = BLOCK.sub(lambda m: f"```sql\n{m.group(1)}```\n\n```text\n{rendered(s, m.group(1))}```", text)
    DOC.write_text(text)


if __name__ == "__main__":
    regenerate()


def test_a_timeline_is_queried_as_its_file_is():
    from tracer.parsers import load_trace

    timeline = load_trace(Path(__file__).parent / "data" / "pair_kineto.json.gz", cache=False)
    n = query(timeline, "SELECT count(*) AS n FROM kernels")["n"].iloc[0]
    assert n == int((timeline.events["kind"] == "kernel").sum()) == 22


@pytest.mark.parametrize("sql", ["SHOW TABLES", "show all tables;"])
def test_show_tables_lists_the_documented_views_only(sql: str) -> None:
    from tracer.sql.session import VIEWS

    with Session(RUN) as s:
        names = s.query(sql)["name"].tolist()
    assert names == sorted(VIEWS)  # not tracer's own relations (_tracer_source_0 ...)


# ----- issue 38.6: a statement's time and memory are bounded, Ctrl-C is one line

ENDLESS = "SELECT count(*) FROM range(100000000000) a"


def test_a_statement_past_its_timeout_is_interrupted_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with Session(RUN, timeout_s=0.3) as s:
        with pytest.raises(SqlError, match=r"took longer than 0.3 s: interrupted \(--timeout sets the limit"):
            s.query(ENDLESS)
        assert s.query("SELECT count(*) AS n FROM kernels")["n"][0] > 0  # the session goes on
        names, _, rows = s.rows("SELECT * FROM range(1000000000) a")  # fetching the rows is timed too
        with pytest.raises(SqlError, match="took longer than 0.3 s"):
            sum(1 for _ in rows)
    assert main(["sql", "--timeout", "0.3", str(RUN), ENDLESS]) == 2
    assert capsys.readouterr().err == (
        "tracer: error: query: took longer than 0.3 s: interrupted (--timeout sets the limit, 0 for none)\n")
    assert main(["sql", "--timeout", "-1", str(RUN), ENDLESS]) == 2
    assert capsys.readouterr().err == "tracer: error: --timeout: must be 0 (none) or more seconds, not -1\n"


def test_a_statement_past_the_memory_limit_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    big = "SELECT count(DISTINCT a.range::VARCHAR || 'padding padding padding') FROM range(20000000) a"
    assert main(["sql", "--memory-limit", "20MB", str(RUN), big]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tracer: error: query: needs more memory than the limit of 20MB (--memory-limit sets it): "
                          "Out of Memory Error") and err.count("\n") == 1
    assert main(["sql", "--memory-limit", "lots", str(RUN), "SELECT 1"]) == 2
    assert capsys.readouterr().err.startswith("tracer: error: --memory-limit: 'lots': Parser Error")
    with Session(RUN) as s:  # the default: half of the memory available, and no spilling into the current folder
        limit = s.query("SELECT current_setting('memory_limit') AS m, current_setting('temp_directory') AS t")
        assert s.memory_limit.endswith("MB") and limit["t"][0] == ""


_CTRL_C_CHILD = """
import sys
import tracer.cli.sql
import tracer.sql.session as session
from tracer.cli import main

cursor = session.Session.cursor


def said(self, sql):  # tell the test the query is about to run
    print("running", file=sys.stderr, flush=True)
    return cursor(self, sql)


session.Session.cursor = said
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.slow  # (a process started, sent a real SIGINT)
def test_ctrl_c_in_a_query_is_one_line_and_exit_130() -> None:
    # it was a 51-line traceback ending in DuckDB's RuntimeError("Query interrupted")
    import signal
    import time

    proc = subprocess.Popen([sys.executable, "-c", _CTRL_C_CHILD, "sql", str(RUN), ENDLESS],
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    assert proc.stderr is not None
    try:
        assert proc.stderr.readline() == "running\n"
        time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        rc = proc.wait(timeout=30)
    finally:
        proc.kill()
    assert (rc, proc.stderr.read()) == (130, "tracer: interrupted\n")
