"""Python frames (issue 37): torch.profiler's ``with_stack=True`` rows are kind ``python``, never ops, host busy
time or graph nodes; every format keeps them; each host call's user frame and line.

``tests/data/stacks_cpu.json.gz``: ``tests/data/stacks_cpu.py`` recorded on the CPU with torch 2.13 (two steps
of a Linear's training loop, a Python loop of small ops, a ``.item()``; its warm-up step unrecorded).
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import numpy as np
import orjson
import pandas as pd
import pyarrow.parquet as pq
import pytest

from tracer.analysis.lanes import host_thread_stats
from tracer.analysis.source import SourceRule, attribute, is_library
from tracer.analysis.source_code import SourceFiles, SourceIndex, resolve, sites, want_of
from tracer.cli import main
from tracer.explain import build_graph
from tracer.exporters import export_timeline
from tracer.files.storage import read_timeline_parquet, write_timeline_parquet
from tracer.parsers import load_trace
from tracer.parsers.kineto import parse_kineto_bytes
from tracer.record.profiler import ENV_STACKS, STACKS_DEFAULT, stacks_on, torch_profiler_settings
from tracer.sql.session import Session
from tracer.timeline import Timeline, TraceMeta, build_events

DATA = Path(__file__).parent / "data"
STACKS = DATA / "stacks_cpu.json.gz"


@pytest.fixture(scope="module")
def stacks():
    return load_trace(STACKS, cache=False)


def _raw_counts() -> dict[str, int]:
    events = json.loads(gzip.decompress(STACKS.read_bytes()))["traceEvents"]
    cats = pd.Series([e.get("cat") for e in events if e.get("ph") == "X"]).value_counts()
    return {str(k): int(v) for k, v in cats.items()}


def test_python_function_rows_are_python_frames_not_ops(stacks):
    raw = _raw_counts()
    kinds = stacks.events["kind"].value_counts()
    assert kinds["python"] == raw["python_function"] > 0
    assert kinds["cpu_op"] == raw["cpu_op"]
    threads = host_thread_stats(stacks.events)
    assert int(threads["ops"].sum()) == raw["cpu_op"]  # (before issue 37: cpu_op + python_function, at 100% busy)
    ops = stacks.events[stacks.events["kind"] == "cpu_op"]
    frames = stacks.events[stacks.events["kind"] == "python"]
    assert int(threads["busy_ns"].iloc[0]) < int(frames["end_ns"].max() - frames["start_ns"].min())
    assert int(threads["busy_ns"].iloc[0]) <= int((ops["end_ns"] - ops["start_ns"]).sum())


def test_python_frames_are_no_graph_nodes(stacks):
    g = build_graph(stacks)
    assert "python" not in set(g.nodes["kind"].astype(str))
    assert len(g.nodes) > 0


@pytest.mark.parametrize("suffix", [".json", ".sqlite", ".parquet"])
def test_exports_keep_python_frames(stacks, tmp_path, suffix):
    out = export_timeline(stacks, tmp_path / f"t{suffix}").path
    back = load_trace(out, cache=False)
    for t in (stacks, back):
        assert (t.events["kind"] == "python").sum() == (stacks.events["kind"] == "python").sum()
    mine = stacks.events[stacks.events["kind"] == "python"].sort_values(["start_ns", "end_ns", "name"])
    theirs = back.events[back.events["kind"] == "python"].sort_values(["start_ns", "end_ns", "name"])
    assert mine["name"].astype(str).tolist() == theirs["name"].astype(str).tolist()
    assert mine["start_ns"].tolist() == theirs["start_ns"].tolist()


def test_a_schema_3_parquet_files_python_frames_are_read_as_python(stacks, tmp_path):
    # what tracer wrote before issue 37: the frames as cpu_op, schema_version 3
    old = stacks.events.copy()
    old["kind"] = old["kind"].where(old["kind"] != "python", "cpu_op")
    path = tmp_path / "old.parquet"
    write_timeline_parquet(type(stacks)(old, stacks.meta), path)
    table = pq.read_table(path)
    meta = orjson.loads(table.schema.metadata[b"tracer"])
    meta["schema_version"] = 3
    pq.write_table(table.replace_schema_metadata({**table.schema.metadata, b"tracer": orjson.dumps(meta)}), path)
    back = read_timeline_parquet(path)
    assert back.events["kind"].astype(str).tolist() == stacks.events["kind"].astype(str).tolist()
    with Session(path) as s:  # (tracer sql scans the file in place: the same rows)
        got = s.query("SELECT kind, count(*) AS n FROM events GROUP BY kind")
    counts = dict(zip(got["kind"], got["n"], strict=True))
    assert counts["python"] == (stacks.events["kind"] == "python").sum()
    assert counts["cpu_op"] == (stacks.events["kind"] == "cpu_op").sum()


def test_sql_frames_view(stacks):
    with Session(stacks) as s:
        frames = s.query("SELECT file, line, function, name FROM frames WHERE file = 'stacks_cpu.py' "
                         "ORDER BY start_ns")
        builtins = s.query("SELECT count(*) AS n FROM frames WHERE file = '' AND line IS NULL AND function = name")
        total = s.query("SELECT count(*) AS n FROM frames")
    assert frames["function"].tolist()[:3] == ["<module>", "main", "step"]
    assert frames["line"].tolist()[2] == 12  # (a function's frame names its first line: `def step`)
    assert int(builtins["n"].iloc[0]) > 0
    assert int(total["n"].iloc[0]) == (stacks.events["kind"] == "python").sum()


def test_a_python_function_row_is_never_an_op():
    data = orjson.dumps({"traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1.0, "dur": 2.0},
        {"ph": "X", "cat": "python_function", "name": "x.py(3): f", "pid": 1, "tid": 1, "ts": 0.5, "dur": 3.0},
    ]})
    t = parse_kineto_bytes(data)
    assert sorted(t.events["kind"].astype(str)) == ["cpu_op", "python"]
    assert np.array_equal(host_thread_stats(t.events)["ops"].to_numpy(), [1])


# -- the user's frame and line (issue 37.2) ------------------------------------------------------------------


def test_library_files_are_told_from_the_users():
    for lib in ("torch/nn/modules/linear.py", "contextlib.py", "logging/__init__.py", "<frozen importlib._bootstrap>",
                "<string>", "tracer/record/_bootstrap/sitecustomize.py", "torchvision/models/resnet.py",
                "/usr/lib/python3.11/threading.py", "/home/u/.venv/lib/python3.12/site-packages/x/y.py",
                "/opt/x/dist-packages/z.py", "threading.py", "numpy/core/fromnumeric.py"):
        assert is_library(lib), lib
    for user in ("train.py", "train_ddp.py", "mypkg/model.py", "/home/u/proj/train.py", "./train.py"):
        assert not is_library(user), user
    rule = SourceRule(("torchvision/*",))
    assert rule.is_user("torchvision/models/resnet.py") and not rule.is_user("torch/nn/functional.py")


def test_a_folder_root_counts_its_files_as_the_users(tmp_path):
    (tmp_path / "vllm" / "v1").mkdir(parents=True)
    (tmp_path / "vllm" / "v1" / "runner.py").write_text("x = 1\n")
    assert is_library("vllm/v1/runner.py")
    assert SourceRule((str(tmp_path),)).is_user("vllm/v1/runner.py")  # (found under the root)
    assert SourceRule((str(tmp_path / "vllm"),)).is_user("vllm/v1/runner.py")  # (the root is the package)
    assert SourceRule((str(tmp_path),)).is_user(str(tmp_path / "vllm" / "v1" / "runner.py"))
    assert not SourceRule((str(tmp_path),)).is_user("torch/x.py")


def test_every_op_of_a_step_has_its_user_frame_and_chain(stacks):
    a = attribute(stacks.events)
    ev = stacks.events
    ops = ev[(ev["kind"] == "cpu_op").to_numpy()]
    assert a.has_stacks and set(a.calls.index) == set(ops.index)  # (every op ran under a user frame)
    frames = a.frames.loc[a.calls["frame"].unique()]
    assert set(frames["function"]) == {"step"} and set(frames["line"]) == {12}
    assert not a.calls["borrowed"].any()
    chain = a.chain(int(a.calls["frame"].iloc[0]))
    assert [a.frames.at[f, "function"] for f in chain] == ["step", "main", "<module>"]


def test_each_call_gets_the_line_it_came_from(stacks):
    a = attribute(stacks.events)
    s = sites(a, stacks.events, SourceFiles([DATA]))
    assert s.read == ("stacks_cpu.py",) and s.unread == ()
    got = s.calls.groupby(["line", "text"]).size()
    src = (DATA / "stacks_cpu.py").read_text().splitlines()
    lines = {i + 1: t.strip() for i, t in enumerate(src)}
    assert {t for _line, t in got.index} == {"loss = model(x).sum()", "loss.backward()", "opt.step()",
                                           "y = x * 2.0", "y = y * 1.5 + 1", "return loss.item()"}
    assert all(lines[n] == t for n, t in got.index) and s.calls["exact"].all()
    in_loop = s.calls[s.calls["in_loop"]]
    assert set(in_loop["text"]) == {"y = y * 1.5 + 1"}
    item = ev_names(stacks, s.calls[s.calls["text"] == "return loss.item()"].index)
    assert "aten::item" in item
    # the frames above: main's recorded call of step (line 31, not the warm-up's at 28), the module's of main
    assert set(zip(s.callers["function"], s.callers["line"], s.callers["text"], strict=True)) == {
        ("main", 31, "step(model, x, opt)"), ("<module>", 38, "main()")}
    # unread: the frame's own line (the function's first), not exact
    bare = sites(a, stacks.events, None)
    assert set(bare.calls["line"]) == {12} and not bare.calls["exact"].any() and set(bare.calls["text"]) == {""}


def ev_names(t, rows):
    return set(t.events.loc[rows, "name"].astype(str))


def _frames_timeline(rows):
    cols = ["start_ns", "end_ns", "kind", "name", "pid", "tid"]
    df = pd.DataFrame(rows, columns=cols)
    return Timeline(build_events({c: df[c].to_numpy() if c != "kind" and c != "name" else df[c].tolist()
                                  for c in cols}), TraceMeta(format="kineto"))


def test_a_thread_without_user_frames_borrows_the_main_threads():
    t = _frames_timeline([
        (0, 1000, "python", "train.py(1): <module>", 1, 1),
        (10, 900, "python", "train.py(5): step", 1, 1),
        (20, 800, "python", "torch/_tensor.py(500): backward", 1, 1),
        (30, 790, "python", "<built-in method run_backward of torch._C._EngineBase object at 0x1>", 1, 1),
        (100, 200, "cpu_op", "aten::mm", 1, 2),  # (the autograd thread: no frames)
        (300, 400, "cpu_op", "aten::add", 1, 3),  # (a thread with library frames only)
        (250, 500, "python", "torch/utils/checkpoint.py(1): recompute", 1, 3),
        (900, 950, "cpu_op", "aten::mul", 2, 2),  # (another process: none)
    ])
    a = attribute(t.events)
    ev = t.events
    mm = ev.index[ev["name"] == "aten::mm"][0]
    add = ev.index[ev["name"] == "aten::add"][0]
    assert set(a.calls.index) == {mm, add} and a.calls["borrowed"].all()
    assert a.frames.loc[a.calls["frame"], "function"].tolist() == ["step", "step"]
    assert ev.loc[a.calls["entry"], "name"].astype(str).tolist() == ["torch/_tensor.py(500): backward"] * 2


def test_no_stacks_and_no_user_frames():
    plain = load_trace(DATA / "copy_side_stream.json.gz", cache=False)
    a = attribute(plain.events)
    assert not a.has_stacks and a.calls.empty and a.frames.empty
    t = _frames_timeline([(0, 100, "python", "torch/x.py(1): f", 1, 1), (10, 20, "cpu_op", "aten::mm", 1, 1)])
    a = attribute(t.events)
    assert a.has_stacks and a.user_frames == 0 and a.calls.empty
    assert len(attribute(t.events, SourceRule(("torch/*",))).calls) == 1


def test_the_line_matching_rules():
    src = "\n".join([
        "def step(model, x, opt):",        # 1
        "    out = model(x)",              # 2
        "    loss = crit(out, x).mean()",  # 3
        "    y = out * 2",                 # 4
        "    for _ in range(3):",          # 5
        "        y = y @ x + 1",           # 6
        "    with torch.no_grad():",       # 7
        "        print(y[0])",             # 8
        "    return loss.item()",          # 9
    ])
    ix = SourceIndex.parse(Path("t.py"), src)
    scope = ix.scope_of(1, "step")
    wants = [want_of("python", "nn.Module: Model_0"), want_of("python", "nn.Module: Loss_0"),
             want_of("python", "<built-in method mean of Tensor object at 0x1>"), want_of("cpu_op", "aten::mul"),
             *[w for _ in range(3) for w in (want_of("cpu_op", "aten::matmul"), want_of("cpu_op", "aten::add"))],
             want_of("python", "torch/autograd/grad_mode.py(80): __enter__"),
             want_of("cpu_op", "aten::select"), want_of("python", "<built-in function print>"),
             want_of("python", "torch/autograd/grad_mode.py(84): __exit__"),
             want_of("python", "<built-in method item of Tensor object at 0x1>")]
    assert resolve(scope, wants) == [2, 3, 3, 4, 6, 6, 6, 6, 6, 6, 7, 8, 8, 7, 9]
    assert scope.lines[6].in_loop and not scope.lines[4].in_loop
    # a named call a loop repeats goes back to its first line; the profiler's running frame starts at its line
    assert resolve(scope, [want_of("python", "<built-in function print>")] * 2) == [8, 8]
    assert resolve(scope, [want_of("python", "nn.Module: M_0")], at=3) == [3]


# -- recording stacks (issue 37.5) ---------------------------------------------------------------------------


def test_stacks_are_off_unless_asked(monkeypatch):
    monkeypatch.delenv(ENV_STACKS, raising=False)
    assert stacks_on() is STACKS_DEFAULT is False
    monkeypatch.setenv(ENV_STACKS, "1")
    assert stacks_on() and not stacks_on(False)
    monkeypatch.setenv(ENV_STACKS, "0")
    assert not stacks_on() and stacks_on(True)
    monkeypatch.setenv(ENV_STACKS, "yes")  # (not 1 or 0: the default)
    assert stacks_on() is STACKS_DEFAULT


SCRIPT = """import torch


def step(model, opt, x):
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss.item()


model = torch.nn.Linear(16, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(3):
    step(model, opt, torch.randn(4, 16))
"""


@pytest.mark.slow
def test_record_stacks_then_lines(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv(ENV_STACKS, raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.py").write_text(SCRIPT)
    assert main(["record", "--stacks", "--out", "runs", "--", sys.executable, "s.py"]) == 0
    (run,) = (tmp_path / "runs").iterdir()
    capsys.readouterr()
    assert main(["lines", str(run), "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    texts = {r["text"] for r in got["lines"]}
    assert {"loss = model(x).pow(2).mean()", "loss.backward()", "opt.step()"} <= texts, texts
    assert all(r["file"] == "s.py" and r["exact"] for r in got["lines"])
    # without --stacks: no frames
    monkeypatch.setenv(ENV_STACKS, "1")  # (the CLI's --no-stacks wins over the environment)
    assert main(["record", "--no-stacks", "--out", "plain", "--", sys.executable, "s.py"]) == 0
    (plain,) = (tmp_path / "plain").iterdir()
    assert "python" not in set(load_trace(plain, cache=False).events["kind"].astype(str))


def test_names_that_are_not_utf8_are_read_and_said():
    # torch.profiler with_stack can write a freed Python frame's name as garbage bytes (pytorch/pytorch#136040)
    data = (b'{"traceEvents": [{"ph": "X", "cat": "python_function", "name": "x.py(1): f\xa0\xc0", "pid": 1, '
            b'"tid": 1, "ts": 1.0, "dur": 5.0}, {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, '
            b'"tid": 1, "ts": 2.0, "dur": 1.0}]}')
    t = parse_kineto_bytes(data, "bad.json")
    assert sorted(t.events["name"].astype(str)) == ["aten::mm", "x.py(1): f\ufffd\ufffd"]
    assert "2 byte sequence(s)" in t.meta.extra["ignored"]["invalid UTF-8"]


@pytest.mark.slow
def test_stacks_keep_torch_from_parsing_its_events_at_stop() -> None:
    # (acc_events makes torch parse every event at stop, where a freed frame's name fails it: pytorch#136040)
    plain = torch_profiler_settings(all_threads=True, stacks=False)
    stacked = torch_profiler_settings(all_threads=True, stacks=True)
    assert "with_stack" not in plain and stacked["with_stack"] is True
    assert "acc_events" not in stacked
    assert {k: v for k, v in plain.items() if k != "acc_events"}.keys() == {
        k for k in stacked if k != "with_stack"}
