"""Findings with the user's line, and GPU time per source line (issue 37, parts 3 and 4), on a hand-made GPU trace
with Python stacks and planted slow-downs on known lines (tests/stack_traces.py), and on a CPU recording.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from stack_traces import PLANTED, write_planted  # tests/stack_traces.py

from tracer.analysis.source import SourceRule
from tracer.analysis.source_code import SourceFiles
from tracer.cli import main
from tracer.explain import explain
from tracer.explain.lines import LINE_FIXES, LOOP_FIX, line_fix, read_sources, source_folders
from tracer.parsers import load_trace

DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    folder = tmp_path_factory.mktemp("planted")
    path = write_planted(folder)
    return path, load_trace(path, cache=False)


@pytest.fixture(scope="module")
def explained(planted):
    path, t = planted
    return explain(t, sources=read_sources(t, files=SourceFiles([path.parent])))


def test_each_planted_line_is_the_source_of_a_finding_of_its_kind(explained):
    kinds_at: dict[int, set[str]] = {}
    for kind, src in zip(explained.findings["kind"], explained.findings["source"], strict=True):
        assert src is not None and src["file"] == "train.py" and src["exact"]
        assert src["function"] == "step"
        assert [c["function"] for c in src["chain"]] == ["main", "<module>"]
        kinds_at.setdefault(src["line"], set()).add(kind)
    for line, kind in PLANTED.items():
        if kind is not None:
            assert kind in kinds_at.get(line, set()), (line, kinds_at)
    assert 5 not in kinds_at  # (the GEMM's line: nothing to fix)


def test_findings_by_line_are_ranked_and_their_fixes_fit_the_line(explained):
    by = explained.by_line()
    assert by["line"].tolist() == [9, 7, 10, 6]  # (by time on the critical path)
    assert list(by["path_ns"]) == sorted(by["path_ns"], reverse=True)
    assert by["count"].sum() == len(explained.findings)
    calls = dict(zip(by["line"], by["call"], strict=True))
    assert calls == {9: LOOP_FIX.call, 7: ".to(...) from pageable memory", 10: ".item()",
                     6: "torch.cuda.synchronize()"}
    assert by.loc[by["line"] == 10, "text"].item() == "return out.sum().item()"
    assert [k["kind"] for k in by.loc[by["line"] == 6, "kinds"].item()] == ["host_sync"]


def test_a_line_fix_needs_its_kind():
    assert line_fix("loss.item()", {"host_sync"}, False).call == ".item()"
    assert line_fix("loss.item()", {"gpu_full"}, False) is None
    assert line_fix("x = y.to(dev)", {"same_stream"}, False).call == ".to(...) on the compute stream"
    assert line_fix("y = y * 2", {"launch_bound"}, True) is LOOP_FIX
    assert line_fix("y = y * 2", {"launch_bound"}, False) is None
    assert {f.call for f in LINE_FIXES} >= {".item()", ".cpu()", "torch.cuda.synchronize()", "print of a tensor"}


def test_explain_json_and_text_give_the_lines(planted, capsys):
    path, _ = planted
    assert main(["explain", str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["source"]["stacks"] and out["source"]["files_read"] == ["train.py"]
    by = out["findings"]["by_line"]
    assert [b["line"] for b in by] == [9, 7, 10, 6]
    assert all(f["source"]["file"] == "train.py" for f in out["findings"]["findings"])
    assert main(["explain", str(path), "--top", "2"]) == 0
    text = capsys.readouterr().out
    assert "Findings by source line" in text
    assert "train.py:9 `out = out * 1.01` — launch-bound gap ×76" in " ".join(text.split())
    assert "in step() ← main() train.py:15 ← <module>() train.py:18" in " ".join(text.split())


def test_without_the_source_file_the_line_is_the_functions_first(planted, tmp_path):
    path, t = planted
    e = explain(t, sources=read_sources(t, files=SourceFiles([tmp_path])))  # (nowhere to find train.py)
    src = [s for s in e.findings["source"]]
    assert {s["line"] for s in src} == {4} and not any(s["exact"] for s in src)
    assert e.sources is not None and e.sources.sites.unread == ("train.py",)


def test_a_trace_without_stacks_says_so_once(tmp_path, capsys):
    path = write_planted(tmp_path, with_stack=False)
    t = load_trace(path, cache=False)
    e = explain(t)
    assert e.sources is not None and not e.sources.has_lines and "no Python stacks" in (e.sources.note or "")
    assert set(e.findings["source"]) == {None} and e.by_line().empty
    assert main(["explain", str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["source"]["stacks"] is False and out["findings"]["by_line"] == []
    assert main(["explain", str(path)]) == 0
    captured = capsys.readouterr()
    assert captured.out.count("no Python stacks") == 1


def test_source_root_widens_the_rule_and_is_searched(planted, tmp_path):
    path, t = planted
    assert source_folders(t, path, ["x/*", str(tmp_path)]) == [tmp_path, path.parent]
    # torch's frames counted as the user's: the innermost user frame is then the library's
    wide = read_sources(t, SourceRule(("torch/*",)))
    assert "torch/cuda/__init__.py" in set(wide.sites.calls["file"])
