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
from tracer.explain import Explanation, explain, explain_lines
from tracer.explain.lines import LINE_FIXES, LOOP_FIX, line_fix, read_sources, source_folders
from tracer.parsers import load_trace
from tracer.sql.session import Session
from tracer.timeline import concat

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


def test_each_planted_line_is_the_source_of_a_finding_of_its_kind(explained: Explanation) -> None:
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


# -- tracer lines (issue 37.4) -------------------------------------------------------------------------------


def test_gpu_time_per_line(planted):
    path, t = planted
    report = explain_lines(t, read_sources(t, files=SourceFiles([path.parent])))
    table = report.table.set_index("line")
    assert table.index.tolist() == [5, 7, 9, 10, 6]  # (by GPU time)
    assert table["gpu_ns"].to_dict() == {5: 8_000_000, 7: 4_000_000, 9: 400_000, 10: 48_000, 6: 0}
    assert table["kernels"].to_dict() == {5: 4, 7: 0, 9: 80, 10: 4, 6: 0}
    assert table["copies"].to_dict() == {5: 0, 7: 4, 9: 0, 10: 4, 6: 0}
    assert abs(table["gpu_share"].sum() - 1) < 1e-9 and report.gpu_ns == {0: 12_448_000}
    assert table.at[6, "sync_ns"] == 4 * 1_970_000  # (cudaDeviceSynchronize waited for the GEMMs)
    assert table.at[7, "exposed_copy_ns"] == 4_000_000 and table.at[5, "exposed_copy_ns"] == 0
    assert 0 < table["path_ns"].sum() <= report.path_ns
    assert table.at[5, "text"] == "out = model(x)" and table["exact"].all()
    assert [c["line"] for c in table.at[9, "chain"]] == [15, 18]
    d = report.to_dict()
    assert d["lines"][0]["line"] == 5 and d["source"]["stacks"] and d["gpu_ns"] == {"0": 12_448_000}


def test_work_launched_under_no_line_of_the_users_is_one_row(planted):
    path, t = planted
    ev = t.events
    steps = ev[(ev["name"] == "train.py(4): step").to_numpy()].sort_values("start_ns")
    first_end = int(steps["end_ns"].iloc[0])
    keep = ~((ev["kind"] == "python") & ((ev["start_ns"] < first_end) | ~ev["name"].isin(["train.py(4): step"])))
    cut = type(t)(ev[keep.to_numpy()].reset_index(drop=True), t.meta)
    table = explain_lines(cut, read_sources(cut, files=SourceFiles([path.parent]))).table
    rest = table[table["file"] == ""]
    assert len(rest) == 1 and rest["gpu_ns"].item() == 12_448_000 // 4 and rest["kernels"].item() == 1 + 20 + 1
    assert abs(table["gpu_share"].sum() - 1) < 1e-9


def test_lines_of_a_job_are_per_rank(planted):
    path, t = planted
    job = concat([t, t], ranks=[0, 1])
    table = explain_lines(job, read_sources(job, files=SourceFiles([path.parent]))).table
    assert sorted(set(table["rank"])) == [0, 1]
    for _rank, rows in table.groupby("rank"):
        assert rows["line"].tolist() == [5, 7, 9, 10, 6] and abs(rows["gpu_share"].sum() - 1) < 1e-9


def test_lines_of_a_cpu_run_are_ranked_by_path_time():
    t = load_trace(DATA / "stacks_cpu.json.gz", cache=False)
    report = explain_lines(t, read_sources(t, files=SourceFiles([DATA])))
    table = report.table
    assert (table["gpu_ns"] == 0).all() and (table["path_ns"] > 0).all() and report.gpu_ns == {}
    assert list(table["path_ns"]) == sorted(table["path_ns"], reverse=True)
    assert set(table["text"]) == {"loss = model(x).sum()", "loss.backward()", "opt.step()", "y = x * 2.0",
                                  "y = y * 1.5 + 1", "return loss.item()"}


def test_the_lines_command(planted, tmp_path, capsys):
    path, _ = planted
    assert main(["lines", str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [r["line"] for r in out["lines"]] == [5, 7, 9, 10, 6] and out["path_ns"] > 0
    assert main(["lines", str(path)]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "12.448 ms of the 12.448 ms of GPU work were launched from 5 lines of your code" in text
    assert "train.py:5 8.000 64.3%" in text
    bare = write_planted(tmp_path, with_stack=False)
    assert main(["lines", str(bare), "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["lines"] == [] and captured.err.count("no Python stacks") == 1
    assert main(["lines", str(bare)]) == 0
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("no Python stacks") == 1


def test_sql_source_lines_view(planted):
    path, t = planted
    with Session(path) as s:
        got = s.query("SELECT line, gpu_ns, path_ns, sync_ns FROM source_lines ORDER BY gpu_ns DESC, line")
    table = explain_lines(t, read_sources(t, files=SourceFiles([path.parent]))).table
    assert got["line"].tolist() == table["line"].tolist()
    assert got["gpu_ns"].tolist() == table["gpu_ns"].tolist()


def test_the_planted_gpu_script_names_the_lines_that_hold_its_slow_downs() -> None:
    # tests/data/planted_train.py is recorded on the GPU machine; its PLANTED table is what a recording of it must
    # show as findings' lines: the table and the code must not drift apart
    import ast

    path = DATA / "planted_train.py"
    source = path.read_text()
    planted = ast.literal_eval(next(
        n.value for n in ast.parse(source).body
        if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "PLANTED"))
    lines = source.splitlines()
    calls = {"synchronize()": "torch.cuda.synchronize()", "pageable": 'host_batch.to("cuda")', "loop": "* 1.0001",
             ".cpu()": ".cpu()", ".item()": ".item()"}
    for line, what in planted.items():
        key = next(k for k in calls if k in what)
        assert calls[key] in lines[line - 1], (line, what, lines[line - 1])
