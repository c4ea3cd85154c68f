"""Python stacks under the nsys back end (issue 37): `tracer record --stacks --backend nsys` asks nsys for its
Python backtraces where the installed nsys has them, and says so in one line where it does not."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from tracer.analysis.source import SourceRule, attribute
from tracer.analysis.source_code import SourceFiles, candidates, sites
from tracer.parsers.nsys_stacks import frame_name, frame_rows
from tracer.record import nsys as nsys_mod
from tracer.record.nsys import PYTHON_BACKTRACE_ARGS, has_python_backtrace, stack_args
from tracer.timeline import build_events

HELP = """#!{python}
import sys
if sys.argv[1:] == ["--version"]:
    print("NVIDIA Nsight Systems version {version}"); sys.exit(0)
if sys.argv[1:] == ["profile", "--help"]:
    print("usage: nsys profile [<args>] [application] [<application args>]")
    print({help_line!r}); sys.exit(0)
sys.exit(3)
"""


def _nsys(tmp_path: Path, version: str, help_line: str) -> str:
    exe = tmp_path / f"nsys-{version}"
    exe.write_text(HELP.format(python=sys.executable, version=version, help_line=help_line))
    exe.chmod(0o755)
    return str(exe)


@pytest.fixture(autouse=True)
def _fresh_cache() -> None:
    has_python_backtrace.cache_clear()


def test_an_nsys_with_python_backtraces_is_asked_for_them(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    exe = _nsys(tmp_path, "2025.3.1", "   --python-backtrace=<cuda|none>  Collect Python backtrace event ...")
    assert stack_args(exe, True) == list(PYTHON_BACKTRACE_ARGS) == ["--python-backtrace=cuda"]
    assert stack_args(exe, False) == []
    assert capsys.readouterr().err == ""


def test_an_older_nsys_records_without_stacks_and_says_so(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    exe = _nsys(tmp_path, "2022.1.1", "   --backtrace=<lbr|fp|dwarf|none>  Select the backtrace method ...")
    assert stack_args(exe, True) == []
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "2022.1.1" in err[0] and "no --python-backtrace" in err[0]
    assert "--backend torch --stacks" in err[0]


def test_an_nsys_that_cannot_run_has_no_python_backtraces(tmp_path: Path) -> None:
    assert not has_python_backtrace(str(tmp_path / "missing-nsys"))
    assert nsys_mod.has_python_backtrace.cache_info().currsize == 1


# ---- backtraces → frame rows ------------------------------------------------------------------------------------


def test_consecutive_calls_share_the_frames_they_have_in_common() -> None:
    start = np.array([0, 10, 20, 30, 5])
    end = np.array([5, 15, 25, 35, 6])
    thread = np.array([1, 1, 1, 1, 2])
    stacks = [("main", "step:28"), ("main", "step:28"), ("main", "step:29"), ("other",), ("x", "y")]
    s, e, pos, names = frame_rows(start, end, thread, stacks)
    rows = sorted(zip(pos.tolist(), names, s.tolist(), e.tolist(), strict=True))
    assert rows == [(0, "main", 0, 25), (0, "step:28", 0, 15), (2, "step:29", 20, 25), (3, "other", 30, 35),
                    (4, "x", 5, 6), (4, "y", 5, 6)]
    # outer frames come before the frames they hold, so that equal intervals nest in that order
    assert names.index("x") < names.index("y") and names.index("main") < names.index("step:28")


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
    assert candidates(here, [tmp_path / "elsewhere"]) == [here]  # (a file that exists is that file, nothing else)
    assert candidates(Path("a/b.py"), [tmp_path]) == [tmp_path / "a" / "b.py"]
