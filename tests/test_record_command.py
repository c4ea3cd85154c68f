"""The parent's half of `tracer record -- COMMAND` (tracer/record_command.py): running, collecting, failing."""

from __future__ import annotations

import os
import shutil
import sys
import textwrap
from pathlib import Path

import pytest

from tracer.job import load_job
from tracer.record_command import CommandNotFoundError, resolve, run_command

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
    dist.destroy_process_group()
    """
)


def test_a_missing_command_is_127_and_writes_nothing(tmp_path: Path) -> None:
    with pytest.raises(CommandNotFoundError) as err:
        run_command(["no-such-program-tracer-test"], tmp_path / "cap")
    assert err.value.exit_code == 127 and "command not found" in str(err.value)
    assert not (tmp_path / "cap").exists()
    with pytest.raises(CommandNotFoundError, match="no command"):
        resolve([])


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


@pytest.mark.skipif(shutil.which("torchrun", path=os.path.dirname(sys.executable)) is None,
                    reason="torchrun is not beside this Python")
def test_a_two_rank_torchrun_job_on_gloo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")  # these machines' gloo needs the loopback named
    (tmp_path / "ddp.py").write_text(DDP)
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    result = run_command([torchrun, "--standalone", "--nproc-per-node", "2", str(tmp_path / "ddp.py")],
                         tmp_path / "cap")
    assert result.exit_code == 0
    # the launcher is not recorded; each worker is, named by its rank
    assert sorted(p["rank"] for p in result.processes) == [0, 1]
    assert all(p["world_size"] == 2 for p in result.processes)
    assert [t.name.split("-")[0] for t in result.traces] == ["rank0", "rank1"]
    job = load_job(result.traces)
    assert sorted(job.events["rank"].unique().tolist()) == [0, 1]
    assert job.meta.extra["ranks"]["1"]["rank_from"] == "file name"
