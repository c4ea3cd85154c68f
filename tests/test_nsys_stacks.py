"""Python stacks under the nsys back end (issue 37): `tracer record --stacks --backend nsys` asks nsys for its
Python backtraces where the installed nsys has them, and says so in one line where it does not."""

from __future__ import annotations

import gzip
import json
import sqlite3
import sys
from pathlib import Path

import numpy as np
import pytest

from tracer.analysis.source import SourceRule, attribute
from tracer.analysis.source_code import SourceFiles, candidates, short_names, sites
from tracer.explain.lines import read_sources
from tracer.exporters import export_timeline
from tracer.parsers import load_trace
from tracer.parsers.nsys_stacks import BACKTRACE_DOMAIN, frame_name, frame_rows
from tracer.record import nsys as nsys_mod
from tracer.record.nsys import (
    NSYS_COMMAND_ARGS,
    PYTHON_BACKTRACE_ARGS,
    export_nsys_sqlite,
    has_python_backtrace,
    with_stacks,
)
from tracer.timeline import build_events

DATA = Path(__file__).parent / "data"

HELP = """#!{python}
import json, sys
args = sys.argv[1:]
open({log!r}, "a").write(json.dumps(args) + "\\n")
if args == ["--version"]:
    print("NVIDIA Nsight Systems version {version}"); sys.exit(0)
if args[1:] == ["--help"]:
    print("usage: nsys " + args[0] + " [<args>]")
    print({help_line!r}); sys.exit(0)
if args[0] == "export":
    open(args[args.index("-o") + 1], "w").write("x"); sys.exit(0)
sys.exit(3)
"""


def _nsys(tmp_path: Path, version: str, help_line: str) -> str:
    exe = tmp_path / f"nsys-{version}"
    exe.write_text(HELP.format(python=sys.executable, version=version, help_line=help_line,
                               log=str(tmp_path / "calls.log")))
    exe.chmod(0o755)
    return str(exe)


@pytest.fixture(autouse=True)
def _fresh_cache() -> None:
    nsys_mod._has_option.cache_clear()


def test_an_nsys_with_python_backtraces_is_asked_for_them(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    exe = _nsys(tmp_path, "2025.3.1", "   --python-backtrace=<cuda|none>  Collect Python backtrace event ...")
    got = with_stacks(NSYS_COMMAND_ARGS, exe, True)
    # nsys takes a Python backtrace only with the call's own backtrace and CPU sampling on
    assert got[-3:] == list(PYTHON_BACKTRACE_ARGS) and "--sample=process-tree" in got and "--sample=none" not in got
    assert {"--python-backtrace=cuda", "--cudabacktrace=all"} <= set(got) and got[:3] == ["profile", "-t", "cuda,nvtx"]
    assert with_stacks(NSYS_COMMAND_ARGS, exe, False) == list(NSYS_COMMAND_ARGS)
    assert capsys.readouterr().err == ""


def test_an_older_nsys_records_without_stacks_and_says_so(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    exe = _nsys(tmp_path, "2022.1.1", "   --backtrace=<lbr|fp|dwarf|none>  Select the backtrace method ...")
    assert with_stacks(NSYS_COMMAND_ARGS, exe, True) == list(NSYS_COMMAND_ARGS)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "2022.1.1" in err[0] and "no --python-backtrace" in err[0]
    assert "--backend torch --stacks" in err[0]


def test_an_nsys_that_cannot_run_has_no_python_backtraces(tmp_path: Path) -> None:
    assert not has_python_backtrace(str(tmp_path / "missing-nsys"))
    assert nsys_mod._has_option.cache_info().currsize == 1


@pytest.mark.parametrize(("help_line", "json_asked"), [("  --include-json [true|false]", True),
                                                       ("  --include-blobs [true|false]", False)])
def test_the_export_keeps_the_backtraces_payloads_where_nsys_can(tmp_path: Path, help_line: str,
                                                                 json_asked: bool) -> None:
    exe = _nsys(tmp_path, "2025.3.1", help_line)
    assert export_nsys_sqlite(exe, tmp_path / "r.nsys-rep", tmp_path / "r.sqlite") is None
    calls = [json.loads(line) for line in (tmp_path / "calls.log").read_text().splitlines()]
    (export,) = [c for c in calls if c[0] == "export" and "-o" in c]
    assert ("--include-json" in export) == json_asked


# ---- backtraces → frame rows ------------------------------------------------------------------------------------


def test_consecutive_calls_share_the_frames_they_have_in_common() -> None:
    start = np.array([0, 10, 20, 30, 5])
    end = np.array([5, 15, 25, 35, 6])
    thread = np.array([1, 1, 1, 1, 2])
    stacks = [("main", "step:28"), ("main", "step:28"), ("main", "step:29"), ("other",), ("x", "y")]
    s, e, pos, names = frame_rows(start, end, thread, stacks)
    rows = sorted(zip(pos.tolist(), names, s.tolist(), e.tolist(), strict=True))
    # (a frame is held until the next call that leaves it: step:28 until 20, main until "other" at 30)
    assert rows == [(0, "main", 0, 30), (0, "step:28", 0, 20), (2, "step:29", 20, 30), (3, "other", 30, 35),
                    (4, "x", 5, 6), (4, "y", 5, 6)]
    # outer frames come before the frames they hold, so that equal intervals nest in that order
    assert names.index("x") < names.index("y") and names.index("main") < names.index("step:28")


def test_a_call_without_a_backtrace_belongs_to_the_frames_open_around_it() -> None:
    # 0-10 backtraced; 2-4 inside it (a driver call), 20-30 none (another thread's, or one nsys took no backtrace
    # of): main and f hold through them until the thread's next backtraced call, 40-50, shares them
    start, end = np.array([0, 2, 20, 40, 60]), np.array([10, 4, 30, 50, 70])
    s, e, pos, names = frame_rows(start, end, np.zeros(5), [("main", "f"), (), (), ("main", "f"), ("main", "g")])
    assert list(zip(names, s.tolist(), e.tolist(), strict=True)) == [("main", 0, 70), ("f", 0, 60), ("g", 60, 70)]


def test_frames_do_not_run_across_threads_or_out_of_order_input() -> None:
    # the same stack on two threads, given out of time order: two runs, each on its own thread
    start, end = np.array([10, 0, 5]), np.array([12, 2, 7])
    s, e, pos, names = frame_rows(start, end, np.array([7, 7, 8]), [("f",), ("f",), ("f",)])
    assert sorted(zip(pos.tolist(), s.tolist(), e.tolist(), strict=True)) == [(1, 0, 12), (2, 5, 7)]
    assert frame_rows(np.zeros(0), np.zeros(0), np.zeros(0), [])[3] == []


def test_a_backtrace_line_is_the_call_s_exact_line(tmp_path: Path) -> None:
    """nsys' frames name the line each was at: with the file readable it is the call's line as it is (its text
    and loop read there), not a line matched from the function's first, as torch.profiler's frames need."""
    src = tmp_path / "train.py"
    src.write_text("import torch\n\n\ndef step(x):\n    y = x * 2\n    for _ in range(3):\n        y = y + 1\n"
                   "    return y.item()\n")
    calls = [  # (start, end, innermost frame line, what the runtime call was)
        (100, 110, 5, "cudaLaunchKernel"), (120, 130, 7, "cudaLaunchKernel"), (140, 150, 8, "cudaMemcpyAsync"),
    ]
    stacks = [(frame_name(str(src), 10, "<module>"), frame_name(str(src), line, "step")) for _, _, line, _ in calls]
    fs, fe, fpos, fnames = frame_rows(np.array([c[0] for c in calls]), np.array([c[1] for c in calls]),
                                      np.ones(len(calls), dtype=np.int64), stacks)
    cols = {
        "start_ns": [c[0] for c in calls] + fs.tolist(), "end_ns": [c[1] for c in calls] + fe.tolist(),
        "kind": ["runtime"] * len(calls) + ["python"] * len(fnames), "name": [c[3] for c in calls] + fnames,
    }
    events = build_events({**cols, "pid": [1] * len(cols["name"]), "tid": [1] * len(cols["name"])})
    a = attribute(events, SourceRule())
    calls_at = events.index[events["kind"] == "runtime"]
    got = sites(a, events, SourceFiles([tmp_path]), current_lines=True).calls.loc[calls_at]
    assert got["line"].tolist() == [5, 7, 8] and got["exact"].all()
    assert got["text"].tolist() == ["y = x * 2", "y = y + 1", "return y.item()"]
    assert got["in_loop"].tolist() == [False, True, False]
    # read as torch.profiler's frames (a line where the run resumed, then matched onwards), two lines go astray
    assert sites(a, events, SourceFiles([tmp_path])).calls.loc[calls_at, "line"].tolist() != [5, 7, 8]


def test_an_absolute_path_from_another_machine_is_found_by_its_trailing_parts(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "train.py").write_text("x = 1\n")
    files = SourceFiles([tmp_path])
    assert files.find("/no/such/checkout/tests/train.py") == tmp_path / "tests" / "train.py"
    assert files.find("/no/such/checkout/other.py") is None
    here = tmp_path / "tests" / "train.py"
    assert candidates(here, [tmp_path / "elsewhere"])[0] == here  # (the path as named first)
    assert candidates(Path("a/b.py"), [tmp_path]) == [tmp_path / "a" / "b.py"]


# ---- an export with Python backtraces ----------------------------------------------------------------------------

def _with_backtraces(tmp_path: Path, every: int = 3) -> tuple[Path, list[tuple[int, int, int]]]:
    """The real compute-copy export with a Python backtrace on every ``every``-th runtime call, as nsys 2025.3
    writes one: a backtrace record (a RUNTIME row of event class 67 repeating the call) and, at its start, an NVTX
    mark of the "Python Backtrace on CUDA" domain whose JSON payload holds the frames, innermost first:
    ``step`` at line 20 + (the call's index % 3), ``main`` at 40, ``<module>`` at 44 of ``train.py``. Returns the
    file and, per backtraced call, (start, correlation id, step's line)."""
    path = tmp_path / "bt.sqlite"
    path.write_bytes(gzip.open(DATA / "nsys_compute_copy.sqlite.gz").read())
    con = sqlite3.connect(path)
    next_id = con.execute("SELECT MAX(id) FROM StringIds").fetchone()[0] + 1
    strings: dict[str, int] = {}

    def sid(text: str) -> int:
        nonlocal next_id
        if text not in strings:
            con.execute("INSERT INTO StringIds VALUES (?, ?)", (next_id, text))
            strings[text], next_id = next_id, next_id + 1
        return strings[text]

    calls = con.execute("SELECT start, end, globalTid, correlationId, nameId FROM CUPTI_ACTIVITY_KIND_RUNTIME "
                        "WHERE eventClass = 0 ORDER BY start").fetchall()
    # (the domain is its process's: nsys numbers domains per process)
    con.execute("INSERT INTO NVTX_EVENTS (start, eventType, text, domainId, globalTid) VALUES (0, 75, ?, 7, ?)",
                (BACKTRACE_DOMAIN, calls[0][2]))
    made = []
    for i, (start, end, gtid, corr, name) in enumerate(calls[::every]):
        line = 20 + i % 3
        frames = [("step", line), ("main", 40), ("&lt;module&gt;", 44)]  # (nsys escapes a name's <>)
        payload = {BACKTRACE_DOMAIN: {"Thread state ID": 1, "Thread state": "Running", "Frames count": 3, "Frames": [
            {"Function": sid(f), "File": sid("/job/checkout/train.py"), "Line": n} for f, n in frames]}}
        # (the record starts a little before the call it repeats, and so does the mark)
        con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, 67, ?, ?, ?, 0, ?)",
                    (start - 5, end + 5, gtid, corr, name, i + 1))
        con.execute("INSERT INTO NVTX_EVENTS (start, eventType, globalTid, domainId, jsonText) VALUES (?, 34, ?, 7, ?)",
                    (start - 5, gtid, json.dumps(payload)))
        made.append((start, corr, line))
    con.commit()
    con.close()
    return path, made


def test_backtrace_records_are_not_calls_and_their_frames_nest_over_the_calls(tmp_path: Path) -> None:
    plain = load_trace(DATA / "nsys_compute_copy.sqlite.gz", cache=False).events
    path, made = _with_backtraces(tmp_path)
    t = load_trace(path, cache=False)
    ev = t.events
    host_calls = ev["kind"].isin(["runtime", "driver"])
    assert host_calls.sum() == plain["kind"].isin(["runtime", "driver"]).sum()  # (no call counted twice)
    assert (ev["kind"] != "python").sum() == len(plain)  # (no mark read as a range, no record as a call)
    frames = ev[ev["kind"] == "python"]
    assert set(frames["name"].astype(str)) == {"/job/checkout/train.py(44): <module>", "/job/checkout/train.py(40): main",
                                               *(f"/job/checkout/train.py({n}): step" for n in (20, 21, 22))}
    assert t.meta.extra.get("frame_lines") == "current"
    # every backtraced call sits under its step frame, with the line it was made from
    a = attribute(ev, SourceRule())
    s = sites(a, ev, SourceFiles([]), current_lines=True).calls
    runtime = ev[(ev["kind"] == "runtime")]
    by_corr = dict(zip(runtime["correlation"].astype("int64"), runtime.index, strict=True))
    lines = {corr: int(s.at[by_corr[corr], "line"]) for _, corr, _ in made if by_corr.get(corr) in s.index}
    assert lines == {corr: line for _, corr, line in made}
    assert (s.loc[[by_corr[c] for c in lines], "function"] == "step").all()


def test_an_export_without_backtraces_keeps_its_calls_and_has_no_frames() -> None:
    t = load_trace(DATA / "nsys_compute_copy.sqlite.gz", cache=False)
    assert not (t.events["kind"] == "python").any() and "frame_lines" not in t.meta.extra


def test_a_backtrace_s_file_is_read_from_the_checkout_it_was_recorded_in(tmp_path: Path) -> None:
    """nsys names the script by its absolute path on the GPU machine: here, under another folder, `tracer lines`
    still reads each line's text from the copy beside the trace."""
    path, made = _with_backtraces(tmp_path)
    (tmp_path / "train.py").write_text("".join(f"# line {n}\n" for n in range(1, 19))
                                       + "def step():\n    a()\n    b()\n    c()\n" + "\n" * 16 + "main()\n")
    t = load_trace(path, cache=False)
    got = read_sources(t, files=SourceFiles([tmp_path])).sites.calls
    assert set(got["text"]) == {"a()", "b()", "c()"} and got["exact"].all()


@pytest.mark.parametrize(("fmt", "name"), [("nsys-sqlite", "out.sqlite"), ("chrome", "out.json"),
                                           ("parquet", "out.parquet")])
def test_exported_backtrace_frames_keep_their_lines(tmp_path: Path, fmt: str, name: str) -> None:
    """Read back from any export, the frames still name the lines the calls were made from (a Chrome trace says so
    in tracer's header: read as torch.profiler's frames, lines would go astray)."""
    path, _ = _with_backtraces(tmp_path)
    t = load_trace(path, cache=False)
    export_timeline(t, tmp_path / name, fmt)
    back = load_trace(tmp_path / name, cache=False)
    assert back.meta.extra.get("frame_lines") == "current"
    lines = [sorted(read_sources(x).sites.calls["line"].tolist()) for x in (t, back)]
    assert lines[0] == lines[1] and set(lines[0]) == {20, 21, 22}


def test_tables_show_absolute_paths_without_the_folders_they_share() -> None:
    assert short_names(["/job/repo/tests/train.py"]) == {"/job/repo/tests/train.py": "train.py"}
    got = short_names(["/job/repo/train.py", "/job/repo/pkg/model.py", "util.py", ""])
    assert got == {"/job/repo/train.py": "train.py", "/job/repo/pkg/model.py": "pkg/model.py", "util.py": "util.py"}
    assert short_names(["/a.py", "/b/c.py"]) == {"/a.py": "/a.py", "/b/c.py": "/b/c.py"}  # (only / in common)


def test_tracer_lines_shows_an_nsys_script_by_its_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tracer.cli import main

    assert main(["lines", str(DATA / "planted_nsys_h100.sqlite.gz"), "--source-root", str(DATA)]) == 0
    out = capsys.readouterr().out
    assert "planted_train.py:33" in out and "/tests/data/planted_train.py" not in out


# ---- odd and hostile exports -------------------------------------------------------------------------------------


def _first_backtraced(path: Path) -> tuple[int, int]:
    """(globalTid, start) of the first backtrace mark."""
    with sqlite3.connect(path) as con:
        row = con.execute("SELECT globalTid, start FROM NVTX_EVENTS WHERE eventType = 34 ORDER BY start").fetchone()
    return int(row[0]), int(row[1])


def test_a_domain_of_the_same_number_in_another_process_keeps_its_ranges(tmp_path: Path) -> None:
    """nsys numbers NVTX domains per process: another process's domain 7 is not the backtraces' domain 7."""
    path, _ = _with_backtraces(tmp_path)
    gtid, start = _first_backtraced(path)
    other = gtid + (1 << 24)  # (the next pid)
    with sqlite3.connect(path) as con:
        con.execute("INSERT INTO NVTX_EVENTS (start, eventType, text, domainId, globalTid) VALUES (0, 75, "
                    "'my_domain', 7, ?)", (other,))
        con.execute("INSERT INTO NVTX_EVENTS (start, end, eventType, text, domainId, globalTid) VALUES (?, ?, 59, "
                    "'user range', 7, ?)", (start, start + 1000, other))
    ev = load_trace(path, cache=False).events
    assert (ev["name"].astype(str) == "user range").sum() == 1 and (ev["kind"] == "python").any()


def test_a_mark_without_its_record_or_call_matches_nothing(tmp_path: Path) -> None:
    path, made = _with_backtraces(tmp_path)
    gtid, start = _first_backtraced(path)
    with sqlite3.connect(path) as con:
        # a mark no record starts with, and calls whose correlation id is missing
        payload = con.execute("SELECT jsonText FROM NVTX_EVENTS WHERE eventType = 34 LIMIT 1").fetchone()[0]
        con.execute("INSERT INTO NVTX_EVENTS (start, eventType, globalTid, domainId, jsonText) VALUES (?, 34, ?, 7, "
                    "?)", (start + 1, gtid, payload))
        con.execute("UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET correlationId = NULL WHERE eventClass = 0 AND "
                    "correlationId NOT IN (SELECT correlationId FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE eventClass = 67)")
    t = load_trace(path, cache=False)
    (note,) = [n for n in t.meta.extra["notes"] if "matched no CUDA call" in n]
    assert note.startswith("1 Python backtraces")
    got = read_sources(t).sites.calls
    assert set(got["line"]) == {20, 21, 22}


def test_an_export_without_the_payload_column_says_so(tmp_path: Path) -> None:
    path, made = _with_backtraces(tmp_path)
    with sqlite3.connect(path) as con:
        con.execute("ALTER TABLE NVTX_EVENTS DROP COLUMN jsonText")
    t = load_trace(path, cache=False)
    assert not (t.events["kind"] == "python").any()
    assert any(n.startswith(f"{len(made):,} Python backtraces are in the report") for n in t.meta.extra["notes"])


def test_hostile_payloads_cost_little_and_refuse_nothing(tmp_path: Path) -> None:
    """A payload nested past Python's limit is no backtrace (the file still reads); one of thousands of frames
    keeps its innermost 512; a name of megabytes is cut."""
    path, made = _with_backtraces(tmp_path)
    with sqlite3.connect(path) as con:
        marks = con.execute("SELECT rowid FROM NVTX_EVENTS WHERE eventType = 34 ORDER BY start").fetchall()
        huge = con.execute("INSERT INTO StringIds (value) VALUES (?)", ("x" * 3_000_000 + ".py",)).lastrowid
        deep = "[" * 100_000 + "]" * 100_000
        wide = json.dumps({BACKTRACE_DOMAIN: {"Frames": [{"Function": huge, "File": huge, "Line": i}
                                                         for i in range(2000)]}})
        con.execute("UPDATE NVTX_EVENTS SET jsonText = ? WHERE rowid = ?", (deep, marks[0][0]))
        con.execute("UPDATE NVTX_EVENTS SET jsonText = ? WHERE rowid = ?", (wide, marks[1][0]))
    t = load_trace(path, cache=False)
    frames = t.events[t.events["kind"] == "python"]
    assert any("deeper than 512 frames" in n for n in t.meta.extra["notes"])
    assert frames["name"].astype(str).str.len().max() < 2 * 4096 + 40
    assert len(frames) < 2000  # (512 frames of the wide one at most, and the others')
