"""tracer's start-up hook records any Python program that imports torch (tracer/record/capture.py, issue 16)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import orjson
import pytest

from tracer.parsers import load_trace
from tracer.record.capture import ENV_DIR, ENV_STEPS, parse_steps

BOOTSTRAP = Path(__file__).resolve().parents[1] / "tracer" / "record" / "_bootstrap"

TRAIN = textwrap.dedent(
    """
    import sys, torch
    from torch.profiler import record_function
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    def train(n):
        for _ in range(n):
            with record_function("train/step"):
                loss = model(torch.randn(16, 32)).pow(2).mean()
                opt.zero_grad(); loss.backward(); opt.step()
    train(int(sys.argv[1]))
    mode = sys.argv[2] if len(sys.argv) > 2 else ""
    if mode == "exit3":
        sys.exit(3)
    if mode == "raise":
        raise RuntimeError("boom")
    if mode == "term":
        import os, signal
        os.kill(os.getpid(), signal.SIGTERM)
    if mode == "own":
        with torch.profiler.profile() as p:
            model(torch.randn(4, 32))
        print("own events", len(p.events()) > 0)
        train(2)
    """
)


def _run(tmp: Path, *args: str, env: dict[str, str] | None = None, script: str = TRAIN) -> tuple[int, Path, str]:
    (tmp / "train.py").write_text(script)
    out = tmp / "out"
    full = {**os.environ, ENV_DIR: str(out), "PYTHONPATH": os.pathsep.join([str(BOOTSTRAP), str(BOOTSTRAP.parents[1])])}
    full.update(env or {})
    proc = subprocess.run([sys.executable, "train.py", *args], cwd=tmp, env=full, capture_output=True, text=True,
                          timeout=120)
    return proc.returncode, out, proc.stdout + proc.stderr


def _status(out: Path) -> dict:
    (status,) = out.glob("*.capture.json")
    return orjson.loads(status.read_bytes())


def _range_counts(path: Path) -> dict[str, int]:
    ev = load_trace(path, cache=False).events
    names = ev.loc[ev["kind"] == "range", "name"].astype(str)
    return names.value_counts().to_dict()


@pytest.mark.slow
def test_a_plain_script_gives_one_trace_with_its_steps_and_ranges(tmp_path: Path) -> None:
    rc, out, text = _run(tmp_path, "4")
    assert rc == 0, text
    status = _status(out)
    assert status["ended"] == "exit" and status["optimizer_steps"] == 4 and status["rank"] is None
    (trace,) = out.glob("*.json.gz")
    assert trace.name == status["files"][0] == f"pid{status['pid']}.json.gz"
    head = trace.read_bytes()[:256]  # (its gzip header names the trace, not the temporary file it was packed as)
    assert head[10 : head.index(b"\0", 10)] == f"pid{status['pid']}.json".encode()
    counts = _range_counts(trace)
    assert counts["train/step"] == 4
    # torch.profiler's own step ranges: #0 from the start to the first step's end, then one per step
    assert {f"ProfilerStep#{i}" for i in range(5)} <= set(counts)
    assert not list(out.glob(".*"))  # no temporary left


@pytest.mark.slow
@pytest.mark.parametrize(("mode", "code", "ended"), [("exit3", 3, "exit"), ("raise", 1, "exception RuntimeError"),
                                                     ("term", -signal.SIGTERM, "SIGTERM")])
def test_every_way_out_keeps_the_trace(tmp_path: Path, mode: str, code: int, ended: str) -> None:
    rc, out, text = _run(tmp_path, "3", mode)
    assert rc == code, text
    status = _status(out)
    assert status["ended"] == ended
    (trace,) = out.glob("*.json.gz")
    assert _range_counts(trace)["train/step"] == 3


@pytest.mark.slow
def test_the_scripts_own_profiler_wins_and_ours_resumes(tmp_path: Path) -> None:
    rc, out, text = _run(tmp_path, "3", "own")
    assert rc == 0 and "own events True" in text, text
    status = _status(out)
    assert len(status["files"]) == 2 and status["notes"]
    first, second = (out / f for f in status["files"])
    assert _range_counts(first)["train/step"] == 3
    assert _range_counts(second)["train/step"] == 2


@pytest.mark.slow
def test_a_schedule_writes_one_part_per_cycle(tmp_path: Path) -> None:
    rc, out, text = _run(tmp_path, "12", env={ENV_STEPS: "1,1,2,0"})
    assert rc == 0, text
    files = _status(out)["files"]
    assert len(files) == 3
    steps = [sorted(n for n in _range_counts(out / f) if n.startswith("ProfilerStep#")) for f in files]
    assert steps == [["ProfilerStep#2", "ProfilerStep#3"], ["ProfilerStep#6", "ProfilerStep#7"],
                     ["ProfilerStep#10", "ProfilerStep#11"]]


def test_a_process_without_torch_leaves_nothing(tmp_path: Path) -> None:
    rc, out, text = _run(tmp_path, script="import sys, json\nprint('torch' in sys.modules)\n")
    assert rc == 0 and text.strip() == "False"
    assert not out.exists()


def test_a_shadowed_sitecustomize_still_runs(tmp_path: Path) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "sitecustomize.py").write_text("import builtins\nbuiltins.THEIRS = 42\n")
    env = {"PYTHONPATH": os.pathsep.join([str(BOOTSTRAP), str(BOOTSTRAP.parents[1]), str(theirs)])}
    rc, _, text = _run(tmp_path, script="print(THEIRS)\n", env=env)
    assert rc == 0 and text.strip() == "42", text


def test_steps_are_checked() -> None:
    assert parse_steps("1,1,2") == (1, 1, 2, 0)
    assert parse_steps(" 0, 1, 3, 2") == (0, 1, 3, 2)
    # 0,0,N: torch stops and restarts the profiler inside the optimizer's own range, and the process segfaults
    for bad in ("1,2", "a,b,c", "1,1,0", "1,1,1,1,1", "-1,1,1", "0,0,3"):
        with pytest.raises(ValueError):
            parse_steps(bad)


@pytest.mark.slow
def test_asking_whether_torch_exists_does_not_switch_capture_off(tmp_path: Path) -> None:
    # transformers' is_torch_available() asks importlib before anything imports torch
    script = "import importlib.util\nimportlib.util.find_spec('torch')\n" + TRAIN
    rc, out, text = _run(tmp_path, "2", script=script)
    assert rc == 0, text
    assert _status(out)["optimizer_steps"] == 2


@pytest.mark.parametrize(("orig_argv", "why"), [
    (["python", "-m", "torch.distributed.run", "--nproc-per-node", "2", "x.py"], "the torchrun launcher"),
    (["/venv/bin/torchrun", "x.py"], "the torchrun launcher"),
    (["python", "-c", "from multiprocessing.forkserver import main; main(3)"], "a multiprocessing child"),
    (["python", "-c", "from multiprocessing.spawn import spawn_main", "--multiprocessing-fork"],
     "a multiprocessing child"),
    (["python", "train.py"], None),
])
def test_launchers_and_workers_are_left_out(monkeypatch: pytest.MonkeyPatch, orig_argv: list[str],
                                            why: str | None) -> None:
    from tracer.record import capture

    monkeypatch.setattr(sys, "orig_argv", orig_argv)
    assert capture._skipped_process() == why
