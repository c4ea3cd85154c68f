"""The parent's half of `tracer record -- COMMAND` (tracer/record/command.py): running, collecting, failing."""

from __future__ import annotations

import os
import shutil
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import install_fake_nsys
from tracer.cli import main
from tracer.errors import UsageError
from tracer.files.rundir import read_meta
from tracer.files.storage import read_timeline_parquet
from tracer.job.load import load_job
from tracer.record.command import CommandNotFoundError, record_command, resolve, run_command
from tracer.record.run import command_stem

SCRIPT = textwrap.dedent(
    """
    import sys, torch
    model = torch.nn.Linear(16, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        loss = model(torch.randn(4, 16)).pow(2).mean(); opt.zero_grad(); loss.backward(); opt.step()
    sys.exit(int(sys.argv[1]))
    """
)

DDP = textwrap.dedent(
    """
    import torch, torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    dist.init_process_group("gloo")
    model = DDP(torch.nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        loss = model(torch.randn(4, 16)).pow(2).mean(); opt.zero_grad(); loss.backward(); opt.step()
    dist.barrier()  # every rank done before any tears gloo down: else one may abort (see scenarios/ddp.py)
    dist.destroy_process_group()
    """
)


def test_a_missing_command_is_127_and_writes_nothing(tmp_path: Path) -> None:
    with pytest.raises(CommandNotFoundError) as err:
        run_command(["no-such-program-tracer-test"], tmp_path / "cap")
    assert err.value.exit_code == 127 and "command not found" in str(err.value)
    assert not (tmp_path / "cap").exists()
    with pytest.raises(UsageError, match="no command") as empty:
        resolve([])
    assert empty.value.exit_code == 2  # a usage error, not a missing program


@pytest.mark.slow
def test_the_exit_code_comes_back_with_the_trace(tmp_path: Path) -> None:
    (tmp_path / "s.py").write_text(SCRIPT)
    result = run_command([sys.executable, str(tmp_path / "s.py"), "3"], tmp_path / "cap")
    assert result.exit_code == 3 and not result.interrupted
    assert len(result.traces) == 1 and len(result.processes) == 1
    assert result.processes[0]["optimizer_steps"] == 3


def test_bad_steps_are_refused_before_running(tmp_path: Path) -> None:
    with pytest.raises(Exception, match="WAIT,WARMUP,ACTIVE"):
        run_command([sys.executable, "-c", "pass"], tmp_path / "cap", steps="1,2")
    assert not (tmp_path / "cap").exists()


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("torchrun", path=os.path.dirname(sys.executable)) is None,
                    reason="torchrun is not beside this Python")
def test_a_two_rank_torchrun_job_on_gloo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")  # these machines' gloo needs the loopback named
    (tmp_path / "ddp.py").write_text(DDP)
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    run = record_command([torchrun, "--standalone", "--nproc-per-node", "2", str(tmp_path / "ddp.py")],
                         out=tmp_path / "runs")
    assert run.exit_code == 0 and run.path.name.startswith("ddp-")
    meta = read_meta(run.path)
    # the launcher is not recorded; each worker is, named by its rank, into traces/
    assert sorted(p["rank"] for p in meta.processes) == [0, 1]
    assert all(p["world_size"] == 2 for p in meta.processes) and meta.missing_ranks == []
    traces = sorted(p.name.split("-")[0] for p in (run.path / "traces").iterdir())
    assert traces == ["rank0", "rank1"] and not (run.path / "trace.json.gz").exists()
    stored = read_timeline_parquet(run.path / "timeline.parquet")
    assert sorted(stored.events["rank"].unique().tolist()) == [0, 1]
    again = load_job(sorted((run.path / "traces").iterdir()))
    assert len(again.events) == len(stored.events)
    assert stored.meta.extra["ranks"]["1"]["source"].startswith("traces/rank1-")


@pytest.mark.slow
def test_the_cli_records_a_command_and_exits_with_its_code(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    (tmp_path / "s.py").write_text(SCRIPT)
    rc = main(["record", "--out", str(tmp_path / "runs"), "--", sys.executable, str(tmp_path / "s.py"), "3"])
    assert rc == 3
    (run,) = (tmp_path / "runs").iterdir()
    assert run.name.startswith("s-")
    assert sorted(p.name for p in run.iterdir()) == ["meta.json", "summary.json", "timeline.parquet", "trace.json.gz"]
    meta = read_meta(run)
    assert meta.command[1:] == [str(tmp_path / "s.py"), "3"] and meta.exit_code == 3 and meta.mode == "command"
    assert "exit 3" in capsys.readouterr().out
    # a scenario run's meta.json does not get the command's keys
    assert "command" not in meta.to_dict() or meta.command


def test_the_cli_refuses_a_missing_command_with_127(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    rc = main(["record", "--out", str(tmp_path / "runs"), "--", "no-such-program-tracer-test", "x"])
    assert rc == 127
    assert capsys.readouterr().err.strip() == "tracer: error: no-such-program-tracer-test: command not found"
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_a_command_that_records_nothing_writes_no_run(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    rc = main(["record", "--out", str(tmp_path / "runs"), "--", sys.executable, "-c", "raise SystemExit(5)"])
    assert rc == 5
    assert "recorded nothing" in capsys.readouterr().err
    assert not any((tmp_path / "runs").iterdir())


def test_scenario_and_command_options_do_not_mix(capsys: pytest.CaptureFixture) -> None:
    assert main(["record", "independent-ops", "--steps", "1,1,1"]) == 2
    assert main(["record"]) == 2
    assert "command after '--'" in capsys.readouterr().err


def test_run_names_come_from_the_script() -> None:
    assert command_stem(["python", "train.py", "--lr", "1"]) == "train"
    assert command_stem(["torchrun", "--nproc-per-node", "2", "/a/b/ddp.py"]) == "ddp"
    assert command_stem(["python", "-m", "pkg.mod"]) == "pkg.mod"
    assert command_stem(["./run me"]) == "run-me"


def test_the_runs_page_names_a_command_where_a_scenario_stands() -> None:
    from tracer.dashboard.data import command_text, what_ran

    meta = {"scenario": "", "command": ["/usr/bin/python3", "train.py", "--lr", "0.1"]}
    assert what_ran(meta) == command_text(meta) == "python3 train.py --lr 0.1"
    assert what_ran({"scenario": "multi-device"}) == "multi-device"
    assert command_text({"command": ["python", "x" * 200]}, limit=20).endswith("…")


def test_the_nsys_backend_wraps_the_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    install_fake_nsys(tmp_path, monkeypatch, capture_range=False)
    run = record_command([sys.executable, "-c", "raise SystemExit(2)"], out=tmp_path / "runs", backend="nsys",
                         delay_s=1.5)
    assert run.exit_code == 2
    assert {p.name for p in run.path.iterdir()} == {"report.nsys-rep", "report.sqlite", "timeline.parquet",
                                                    "meta.json", "summary.json"}
    meta = read_meta(run.path)
    assert meta.backend == "nsys" and meta.backend_details["nsys_version"].endswith("fake")
    assert "--delay" in meta.backend_details["nsys_args"] and meta.exit_code == 2
    assert run.summary["format"] == "nsys" and run.summary["devices"]["0"]["memcpys"] == 10
    with pytest.raises(Exception, match="delay/--duration"):
        record_command([sys.executable, "-c", "pass"], out=tmp_path / "runs", backend="nsys", steps="1,1,1")


def test_the_nsys_backend_needs_nsys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(Exception, match="not on PATH"):
        record_command([sys.executable, "-c", "pass"], out=tmp_path / "runs", backend="nsys")


DIES = textwrap.dedent(
    """
    import os, time, torch, torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    dist.init_process_group("gloo")
    model = DDP(torch.nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        loss = model(torch.randn(4, 16)).pow(2).mean(); opt.zero_grad(); loss.backward(); opt.step()
    if dist.get_rank() == 1:
        os._exit(7)  # dies without a trace (nothing runs at os._exit)
    time.sleep(60)  # rank 0 waits until torchrun tears the job down with SIGTERM
    """
)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("torchrun", path=os.path.dirname(sys.executable)) is None,
                    reason="torchrun is not beside this Python")
def test_a_rank_that_dies_is_named_and_the_others_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")
    (tmp_path / "die.py").write_text(DIES)
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    run = record_command([torchrun, "--standalone", "--nproc-per-node", "2", str(tmp_path / "die.py")],
                         out=tmp_path / "runs")
    meta = read_meta(run.path)
    assert run.exit_code != 0 and meta.missing_ranks == [1] and not meta.interrupted
    # rank 0 was torn down by torchrun's SIGTERM and saved its trace on the way out
    assert [(p["rank"], p["ended"]) for p in meta.processes] == [(0, "SIGTERM")]
    stored = read_timeline_parquet(run.path / "timeline.parquet")
    assert stored.events["rank"].unique().tolist() == [0] and len(stored.events) > 0


SLEEPS = textwrap.dedent(
    """
    import sys, time, torch
    model = torch.nn.Linear(16, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(2):
        loss = model(torch.randn(4, 16)).pow(2).mean(); opt.zero_grad(); loss.backward(); opt.step()
    print("ready", flush=True)
    time.sleep(60)
    """
)


@pytest.mark.slow
def test_ctrl_c_keeps_what_was_captured(tmp_path: Path) -> None:
    import signal
    import subprocess
    import time

    (tmp_path / "s.py").write_text(SLEEPS)
    # a terminal's Ctrl-C goes to the whole foreground process group: tracer and the command alike
    proc = subprocess.Popen([sys.executable, "-m", "tracer", "record", "--out", str(tmp_path / "runs"), "--",
                             sys.executable, str(tmp_path / "s.py")], stdout=subprocess.PIPE, text=True,
                            start_new_session=True)
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.strip() == "ready":
            break
    time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGINT)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130  # Python dies of an uncaught KeyboardInterrupt by SIGINT: 128 + 2, as a shell says
    (run,) = (tmp_path / "runs").iterdir()
    meta = read_meta(run)
    assert meta.interrupted and [p["ended"] for p in meta.processes] == ["interrupted"]
    assert meta.processes[0]["optimizer_steps"] == 2 and "interrupted" in out
