"""`tracer summary`: the JSON contract, the table, and one clear line for every kind of bad input."""

from __future__ import annotations

import gzip
import json
import os
import sqlite3
from pathlib import Path

import pytest

from tests.conftest import DATA, cli_main, run_cli


@pytest.mark.slow
def test_summary_json_shape(data_dir):
    proc = cli_main("summary", "--json", str(data_dir / "copy_side_stream.json.gz"))
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["format"] == "kineto"
    assert set(out["devices"]) == {"0"}
    assert out["devices"]["0"] == {
        "compute_ns": 130922833,
        "copy_ns": 57973731,
        "overlap_ns": 56818860,
        "busy_ns": 132077704,
        "kernels": 50,
        "memcpys": 50,
        "memsets": 0,
    }
    assert out["lanes"] == [
        {"device": 0, "stream": 7, "kernels": 50, "memcpys": 0, "memsets": 0, "busy_ns": 130922833},
        {"device": 0, "stream": 21, "kernels": 0, "memcpys": 50, "memsets": 0, "busy_ns": 57973731},
    ]
    assert isinstance(out["span_ns"], int) and out["span_ns"] >= 132077704


@pytest.mark.slow
def test_summary_json_nsys_via_python_m(data_dir):
    proc = run_cli("summary", "--json", str(data_dir / "nsys_compute_copy.sqlite.gz"), module=True)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["format"] == "nsys"
    assert out["devices"]["0"]["kernels"] == 11


@pytest.mark.slow
def test_summary_table(data_dir):
    proc = cli_main("summary", str(data_dir / "copy_side_stream.json.gz"))
    assert proc.returncode == 0, proc.stderr
    assert "98.0%" in proc.stdout  # copy hidden behind compute
    assert "NVIDIA H200" in proc.stdout


def _bad_inputs(tmp: Path, data: Path) -> dict[str, tuple[Path, str]]:
    """name -> (file, a phrase the one-line error must contain)"""
    empty = tmp / "empty.json"
    empty.write_bytes(b"")
    truncated = tmp / "truncated.json"
    truncated.write_bytes(gzip.decompress((data / "two_streams.json.gz").read_bytes())[:5000])
    truncated_gz = tmp / "truncated.json.gz"
    truncated_gz.write_bytes((data / "two_streams.json.gz").read_bytes()[:3000])
    not_trace = tmp / "config.json"
    not_trace.write_text('{"learning_rate": 0.1}')
    wrong_types = tmp / "wrong.json"
    # (an event whose ts is not a number is skipped and reported, not a reason to refuse the trace:
    # tests/test_kineto_tolerant.py)
    wrong_types.write_text('{"traceEvents": {"ph": "X", "ts": 1}}')
    other_db = tmp / "app.sqlite"
    con = sqlite3.connect(other_db)
    con.execute("CREATE TABLE users (id INTEGER)")
    con.commit()
    con.close()
    rand = tmp / "random.bin"
    rand.write_bytes(bytes(range(256)) * 20)
    text = tmp / "notes.txt"
    text.write_text("hello")
    # device / stream beyond the schema's int16 / int32 used to crash build_events with a pandas traceback
    def kernel_trace(args: dict[str, int], **top: object) -> str:
        kernel = {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10, "dur": 5, "args": args}
        return json.dumps({"traceEvents": [kernel], **top})

    big_device = tmp / "big_device.json"
    big_device.write_text(kernel_trace({"device": 99999, "stream": 7}))
    big_stream = tmp / "big_stream.json"
    big_stream.write_text(kernel_trace({"device": 0, "stream": 99999999999}))
    # content the Kineto parser trips on (OverflowError from np.int16) used to escape as a traceback;
    # load_trace turns any such parser exception into one line naming the file. (A deviceProperties id "x" is
    # now ignored, the trace read: tests/test_kineto_tolerant.py)
    big_rank = tmp / "big_rank.json"
    big_rank.write_text(kernel_trace({"device": 0, "stream": 7}, distributedInfo={"rank": 70000}))
    return {
        "missing": (tmp / "nope.json", "no such file"),
        "empty": (empty, "empty file"),
        "truncated": (truncated, "truncated JSON"),
        "truncated-gzip": (truncated_gz, "truncated gzip"),
        "not-a-trace": (not_trace, "not a Kineto/Chrome trace"),
        "wrong-field-types": (wrong_types, "not a Kineto/Chrome trace"),
        "other-sqlite": (other_db, "not an Nsight Systems export"),
        "random-bytes": (rand, "unrecognised content"),
        "text": (text, "unrecognised content"),
        "nsys-rep-without-nsys": (_fake_rep(tmp), "nsys export --type sqlite"),
        "empty-dir": (_empty_dir(tmp), "not a tracer run"),
        "device-out-of-range": (big_device, "device 99999 is out of range"),
        "stream-out-of-range": (big_stream, "stream 99999999999 is out of range"),
        "rank-out-of-range": (big_rank, "could not be read: unexpected content (OverflowError"),
    }


def _fake_rep(tmp: Path) -> Path:
    p = tmp / "report.nsys-rep"
    p.write_bytes(b"\x00\x01binary report")
    return p


def _empty_dir(tmp: Path) -> Path:
    p = tmp / "emptyrun"
    p.mkdir()
    return p


BAD = [
    "missing", "empty", "truncated", "truncated-gzip", "not-a-trace", "wrong-field-types", "other-sqlite",
    "random-bytes", "text", "nsys-rep-without-nsys", "empty-dir", "device-out-of-range", "stream-out-of-range",
    "rank-out-of-range",
]


@pytest.mark.slow
@pytest.mark.parametrize("case", BAD)
def test_bad_input_one_line_exit_2(tmp_path, data_dir, case, monkeypatch):
    path, phrase = _bad_inputs(tmp_path, data_dir)[case]
    proc = cli_main("summary", str(path))
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert str(path) in lines[0]
    assert phrase in lines[0]
    assert "Traceback" not in proc.stderr
    assert proc.stdout == ""


@pytest.mark.slow
def test_one_bad_file_does_not_stop_the_batch(tmp_path, data_dir):
    proc = cli_main("summary", "--json", str(tmp_path / "nope.json"), str(data_dir / "two_streams.json.gz"))
    assert proc.returncode == 2
    assert "no such file" in proc.stderr
    assert json.loads(proc.stdout)["devices"]["0"]["kernels"] == 100


def test_unknown_command_is_a_usage_error():
    proc = run_cli("frobnicate")
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr


def test_range_names_are_wrapped_not_cut_on_a_narrow_terminal():
    # At 80 columns the three compute-copy ranges all read "compute-copy/run+copy-…", telling the user nothing
    from rich.console import Console

    from tracer.cli.summary import render_summary

    summary = {
        "format": "kineto", "source": "run", "span_ns": 1, "devices": {}, "lanes": [],
        "ranges": [
            {"name": f"compute-copy/run+copy-{v}", "count": 1, "host_ns": 1, "gpu_busy_ns": 0, "kernels": 0,
             "memcpys": 0}
            for v in ("side-stream", "blocking", "non-blocking")
        ],
    }
    console = Console(width=80, record=True)
    for r in render_summary(summary, width=80):
        console.print(r)
    text = console.export_text()
    assert "…" not in text
    assert "side-stream" in text and "non-blocking" in text
    assert any("blocking" in ln and "non-blocking" not in ln for ln in text.splitlines())


def test_a_figure_is_never_cut_short_on_a_narrow_terminal():
    # At 80 columns the comm table of HTA's two-rank job printed its exposed comm as "336.9…", and folding cells
    # split figures over two lines ("10,83" / "1"): numbers that are not the ones computed. Every figure of every
    # table must appear whole; text columns give way, and a table too wide is printed wider, uncut.
    from rich.console import Console

    from tracer.analysis.registry import Table, TextOptions, text_analyses
    from tracer.cli.summary import render_blocks
    from tracer.job.load import summarize_job

    ranks = [DATA / "external" / f"HTA_trace_filter_sampled_rank-{r}.json.gz" for r in (0, 1)]
    summary, _ = summarize_job(ranks, cache=False)
    blocks = [b for a in text_analyses() if a.blocks is not None
              for b in a.blocks(summary.part(a.name), summary, TextOptions())]
    figures = {w for b in blocks if isinstance(b, Table) for row in b.rows
               for col, cell in zip(b.columns, row) if col.justify == "right" and not col.fit
               for w in str(cell).split()}
    assert len(figures) > 100
    for width in (80, 60):
        console = Console(width=width, record=True)
        for r in render_blocks(blocks, width=width):
            console.print(r, crop=False)
        words = set(console.export_text().split())
        assert not figures - words, sorted(figures - words)[:10]


@pytest.mark.parametrize("width", [80, 100, 120])
def test_long_range_names_break_after_a_separator_not_mid_word(width):
    from rich.console import Console

    from tracer.cli.summary import render_summary

    names = ["mlp-data-parallel/forward-backward", "mlp-data-parallel/broadcast", "dependency-graph/streams"]
    summary = {
        "format": "kineto", "source": "run", "span_ns": 1, "devices": {}, "lanes": [],
        "ranges": [{"name": n, "count": 1, "host_ns": 1, "gpu_busy_ns": 0, "kernels": 0, "memcpys": 0}
                   for n in names],
    }
    console = Console(width=width, record=True)
    for r in render_summary(summary, width=width):
        console.print(r)
    text = console.export_text()
    lines = [ln.strip() for ln in text.splitlines()]
    assert max(len(ln) for ln in text.splitlines()) <= width
    words = {w for n in names for w in n.replace("/", " ").replace("-", " ").split()}
    # every word of every name appears whole on some line: nothing was cut inside a word
    for w in words:
        assert any(w in ln for ln in lines), (w, lines)
    assert "…" not in text


def test_wrap_name_prefers_separators():
    from tracer.cli._tables import wrap_name

    assert wrap_name("mlp-data-parallel/forward-backward", 20) == "mlp-data-parallel/\nforward-backward"
    assert wrap_name("short", 20) == "short"
    assert wrap_name("abcdefghijklmnopqrstuvwxyz", 10) == "abcdefghij\nklmnopqrst\nuvwxyz"  # no separator: cut


@pytest.mark.slow
def test_summary_of_a_folder_summarises_each_run_in_it(tmp_path, data_dir):
    import shutil

    (tmp_path / "a").mkdir()
    shutil.copy(data_dir / "two_streams.json.gz", tmp_path / "a" / "two_streams.json.gz")
    shutil.copy(data_dir / "copy_side_stream.json.gz", tmp_path / "copy_side_stream.json.gz")
    proc = cli_main("summary", "--json", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    sources = [Path(json.loads(line)["source"]).name for line in proc.stdout.splitlines()]
    assert sorted(sources) == ["copy_side_stream.json.gz", "two_streams.json.gz"]


def test_summary_of_a_folder_without_runs_says_what_to_pass(tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    proc = cli_main("summary", str(tmp_path))
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "no run directories or traces" in lines[0]


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX")
def test_a_loop_of_symbolic_links_is_said_as_one(tmp_path):
    loop = tmp_path / "loop.json"
    loop.symlink_to(loop.name)  # (was "no such file or directory")
    proc = cli_main("summary", str(loop), timeout=60)
    assert proc.returncode == 2
    assert proc.stderr == f"tracer: error: {loop}: not a regular file but a loop of symbolic links: give a trace file\n"


@pytest.mark.slow
def test_a_pipe_or_a_device_is_refused_at_once_and_a_folder_scan_says_it_skipped_one(tmp_path, data_dir, capsys):
    # Reading a named pipe blocks until a writer comes (the command hung forever); a device may never end.
    import shutil

    pipe = tmp_path / "rank1.json"
    os.mkfifo(pipe)
    device = tmp_path / "zero.json"
    device.symlink_to("/dev/zero")
    (tmp_path / "rank9.json").symlink_to(tmp_path / "gone.json")
    for path, what in ((pipe, "a named pipe"), (device, "a character device")):
        proc = cli_main("summary", str(path), timeout=60)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
        assert f"not a regular file but {what}" in proc.stderr
    device.unlink()
    shutil.copy(data_dir / "two_streams.json.gz", tmp_path / "rank0.json.gz")
    proc = cli_main("summary", "--json", str(tmp_path), timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert [Path(json.loads(line)["source"]).name for line in proc.stdout.splitlines()] == ["rank0.json.gz"]
    notes = sorted(proc.stderr.strip().splitlines())
    assert notes == [f"tracer: note: {pipe}: skipped: not a regular file but a named pipe (FIFO)",
                     f"tracer: note: {tmp_path / 'rank9.json'}: skipped: not a regular file but a broken symbolic link"]
    # the other readers too (the review found them hanging): sql on a pipe, a folder scan in sql, and a run
    # directory whose meta.json is a pipe, for summary and for the dashboard's run store
    proc = cli_main("sql", str(pipe), "SELECT 1", timeout=60)
    assert proc.returncode == 2 and "not a regular file but a named pipe" in proc.stderr
    proc = cli_main("sql", str(tmp_path), "SELECT count(*) FROM events", timeout=60)
    assert proc.returncode == 0 and f"{pipe}: skipped: not a regular file" in proc.stderr
    run = tmp_path / "run"
    shutil.copytree(Path(__file__).parent.parent / "tracer" / "examples" / "compute-copy-side-stream-streams-20261202-161322",
                    run)
    (run / "meta.json").unlink()
    os.mkfifo(run / "meta.json")
    proc = cli_main("summary", str(run), timeout=60)
    assert proc.returncode == 2 and "meta.json: not a regular file but a named pipe" in proc.stderr
    from tracer.dashboard.data import RunStore

    capsys.readouterr()
    RunStore([tmp_path], examples=False).runs()
    assert capsys.readouterr().err.count(f"{pipe}: skipped") == 1


@pytest.mark.parametrize("command", [[], ["summary"], ["record"], ["export"], ["dashboard"], ["scenarios"]])
def test_help_shows_no_value_placeholder_for_flags(command):
    proc = cli_main(*command, "--help")
    assert proc.returncode == 0, proc.stderr
    assert "--help" in proc.stdout
    assert "<bool>" not in proc.stdout


@pytest.mark.parametrize(
    "args, phrase",
    [
        (["summary"], "Missing argument"),
        (["summary", "--bogus", "x"], "No such option: --bogus"),
        (["record"], "name a scenario"),
    ],
)
def test_usage_errors_are_one_line(args, phrase):
    """Regression: click's usage errors printed a multi-line box; now one line with a --help hint, exit 2."""
    proc = cli_main(*args)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tracer: error: ") and phrase in lines[0]
    assert "--help" in lines[0]


def test_bare_tracer_shows_help():
    proc = run_cli()
    assert proc.returncode == 0
    assert "summary" in proc.stdout and "record" in proc.stdout and "error" not in proc.stderr


@pytest.mark.slow
@pytest.mark.parametrize("module", [False, True])
def test_the_command_s_output_is_whole_though_it_leaves_without_teardown(module: bool) -> None:
    """tracer.cli.run: the command and python -m tracer end through leave(); what they printed is all there."""
    trace = DATA / "mlp_train_200.json.gz"
    res = run_cli("summary", "--json", str(trace), str(trace), module=module)
    assert res.returncode == 0, res.stderr
    docs = [json.loads(line) for line in res.stdout.splitlines()]
    assert len(docs) == 2 and docs[0] == docs[1] and docs[0]["events"] > 0
    bad = run_cli("summary", str(DATA / "no-such-trace.json"), module=module)
    assert bad.returncode == 2 and bad.stderr.startswith("tracer: error: ") and len(bad.stderr.splitlines()) == 1


@pytest.mark.slow
@pytest.mark.parametrize("thread", [False, True])
def test_leave_runs_the_exit_handlers_flushes_and_joins_a_running_thread(tmp_path: Path, thread: bool) -> None:
    """tracer.cli.leave(code): exit handlers run (a temporary folder's removal is one), unflushed output is written,
    the code is the process's; where a thread still runs, the usual exit, which waits for it."""
    import subprocess
    import sys

    marks = tmp_path / "marks"
    code = f"""
import atexit, sys, threading, time
from pathlib import Path
import tracer.cli as cli
marks = Path({str(marks)!r})
atexit.register(lambda: marks.write_text(marks.read_text() + "handler " if marks.exists() else "handler "))
if {thread}:
    def late():
        time.sleep(0.5)
        marks.write_text((marks.read_text() if marks.exists() else "") + "thread ")
    threading.Thread(target=late).start()
sys.stdout.write("no newline, not flushed")
sys.stderr.write("nor this")
cli.leave(7)
"""
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert res.returncode == 7 and res.stdout == "no newline, not flushed" and res.stderr == "nor this"
    assert marks.read_text() == ("thread handler " if thread else "handler ")


@pytest.mark.parametrize(
    ("command", "usage"),
    [
        ("summary", "tracer summary [OPTIONS] PATH..."),  # (Typer wrote {PATH}: required, and lost the "...")
        ("export", "tracer export [OPTIONS] PATH..."),  # ({path})
        ("dashboard", "tracer dashboard [OPTIONS] [PATH]..."),  # ([paths]...)
        ("diff", "tracer diff [OPTIONS] A B"),  # ({A} {B})
        ("record", "tracer record [OPTIONS] [SCENARIO]"),  # ([scenario])
    ],
)
def test_usage_lines_say_arguments_as_click_and_man_pages_do(command: str, usage: str) -> None:
    from typer.testing import CliRunner

    from tracer.cli import app

    result = CliRunner().invoke(app, [command, "--help"], prog_name="tracer", env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    line = next(line for line in result.output.splitlines() if "Usage:" in line)
    assert line.strip() == f"Usage: {usage}"


def test_run_failures_say_each_rank_that_did_not_end_well() -> None:
    from tracer.cli._report import run_failures

    run = {"processes": [{"rank": 0, "exit_code": 0}, {"rank": 1, "exit_code": -9, "timed_out": True},
                         {"rank": 2, "exit_code": 1, "last_line": "RuntimeError: boom"},
                         {"rank": 3, "exit_code": -15, "torn_down": True}],
           "missing_ranks": [1, 3]}
    assert run_failures({"run": run}) == [
        "rank 1 hung (ended at the timeout)", "rank 2 exited with 1: RuntimeError: boom",
        "rank 3 was torn down after another rank failed", "no trace from ranks 1, 3: the figures are the other ranks'"]
    assert run_failures({"run": {"processes": [{"rank": 0, "exit_code": 0}], "missing_ranks": []}}) == []
    assert run_failures({}) == [] and run_failures({"run": "damaged"}) == []
