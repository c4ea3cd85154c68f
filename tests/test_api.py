"""Recording from inside a program: tracer.profile() and tracer.handler() (tracer/record/api.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

import tracer
from tracer.files.rundir import read_meta
from tracer.files.storage import read_timeline_parquet


def _train(run: tracer.record.api.Run | None, steps: int) -> None:
    model = torch.nn.Linear(16, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(steps):
        with torch.profiler.record_function("api/step"):
            loss = model(torch.randn(4, 16)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        if run is not None:
            run.step()


def _ranges(path: Path) -> dict[str, int]:
    ev = read_timeline_parquet(path / "timeline.parquet").events
    return ev.loc[ev["kind"] == "range", "name"].astype(str).value_counts().to_dict()


@pytest.mark.slow
def test_profile_writes_a_run_with_its_steps(tmp_path: Path) -> None:
    with tracer.profile(out=tmp_path / "runs", name="mine") as run:
        _train(run, 3)
    assert run.path == tmp_path / "runs" / "mine"
    assert sorted(p.name for p in run.path.iterdir()) == ["meta.json", "summary.json", "timeline.parquet",
                                                           "trace.json.gz"]
    counts = _ranges(run.path)
    assert counts["api/step"] == 3 and {"ProfilerStep#0", "ProfilerStep#1", "ProfilerStep#2"} <= set(counts)
    meta = read_meta(run.path)
    assert meta.mode == "api" and meta.backend == "torch" and run.summary["events"] > 0


def test_profile_keeps_the_run_when_the_block_raises(tmp_path: Path) -> None:
    with pytest.raises(ZeroDivisionError):
        with tracer.profile(out=tmp_path / "runs") as run:
            _train(run, 2)
            1 / 0  # noqa: B018
    assert run.path is not None and _ranges(run.path)["api/step"] == 2
    assert not [p for p in (tmp_path / "runs").iterdir() if p.name.startswith(".")]  # no temporary left


# (a schedule of two cycles without warmup, as a user may write one: torch warns of both, on purpose here)
@pytest.mark.filterwarnings("ignore:Profiler won't be using warmup:UserWarning",
                            "ignore:Warning. Profiler clears events:UserWarning")
def test_handler_makes_a_run_of_each_cycle(tmp_path: Path) -> None:
    on_ready = tracer.handler(out=tmp_path / "runs", name="cyc")
    sched = torch.profiler.schedule(wait=0, warmup=0, active=2, repeat=2)
    with torch.profiler.profile(schedule=sched, on_trace_ready=on_ready) as prof:
        for _ in range(4):
            _train(None, 1)
            prof.step()
    assert [p.name for p in on_ready.runs] == ["cyc", "cyc-2"]
    for run in on_ready.runs:
        assert _ranges(run)["api/step"] == 2


def test_import_tracer_stays_light() -> None:
    code = "import sys, tracer; print('torch' in sys.modules, 'pandas' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


def test_rank_info_needs_a_job_of_two_or_more() -> None:
    from tracer.record.gather import rank_info

    assert rank_info({"RANK": "0", "WORLD_SIZE": "1"}) is None and rank_info({}) is None
    a = rank_info({"RANK": "0", "WORLD_SIZE": "2", "MASTER_PORT": "29500", "TORCHELASTIC_RUN_ID": "x"})
    b = rank_info({"RANK": "1", "WORLD_SIZE": "2", "MASTER_PORT": "29500", "TORCHELASTIC_RUN_ID": "x"})
    c = rank_info({"RANK": "1", "WORLD_SIZE": "2", "MASTER_PORT": "29501", "TORCHELASTIC_RUN_ID": "x"})
    assert a and b and c and a.key == b.key != c.key and (a.rank, b.rank, b.world_size) == (0, 1, 2)


def test_the_rank_that_completes_the_set_builds_it_once(tmp_path: Path) -> None:
    import gzip

    from tracer.record.gather import RankInfo, arrive, staged_processes

    out = tmp_path / "runs"
    ranks = [RankInfo(r, 3, "k") for r in (2, 0, 1)]
    arrivals = []
    for info in ranks:
        gz = tmp_path / f"t{info.rank}.json.gz"
        gz.write_bytes(gzip.compress(b'{"traceEvents": []}'))
        arrivals.append(arrive(gz, out, info, 1, f"first-to-arrive-was-{info.rank}"))
    # the first arrival named the run; only the last completed it
    assert {a.name for a in arrivals} == {"first-to-arrive-was-2"}
    assert [a.complete for a in arrivals] == [False, False, True]
    assert [p["rank"] for p in staged_processes(arrivals[-1].staging)] == [0, 1, 2]
    assert not list(tmp_path.glob("t*.json.gz"))  # each trace was moved in, not copied


DDP_HANDLER = """
import sys, torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
import tracer
dist.init_process_group("gloo")
model = DDP(torch.nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
sched = torch.profiler.schedule(wait=0, warmup=0, active=2, repeat=1)
with torch.profiler.profile(schedule=sched, on_trace_ready=tracer.handler(out=sys.argv[1], name="job")) as prof:
    for _ in range(3):
        loss = model(torch.randn(4, 16)).pow(2).mean(); opt.zero_grad(); loss.backward(); opt.step()
        prof.step()
# every rank done before any tears gloo down (scenarios/ddp.py): a rank whose peer is still finishing (here the one
# that builds the run) may abort, "terminate called without an active exception" (1 launch in 8 under load)
dist.barrier()
dist.destroy_process_group()
"""


def test_a_rank_that_sees_the_set_complete_while_another_builds_the_run(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Both ranks can count the whole set at once (their profilers stop together); the one that claims it builds
    the run and removes the staging folder while the other is still counting and claiming. The window is widened
    here so that the old order failed every time (FileNotFoundError in the late rank, or a staging folder left)."""
    import shutil

    from tests.job_runs import GLOO_RANKS
    from tracer.record import gather as rank_gather
    from tracer.record.api import write_job_run
    from tracer.record.gather import RankInfo, arrive

    out = tmp_path / "runs"
    info = [RankInfo(r, 2, "k") for r in (0, 1)]
    gz = [tmp_path / f"t{r}.json.gz" for r in (0, 1)]
    for src, dest in zip(GLOO_RANKS, gz):
        shutil.copy(src, dest)
    count = rank_gather.staged_traces
    built: list[Path] = []

    def rank_0_finishes_while_rank_1_counts(staging: Path) -> list[Path]:
        if built:
            return count(staging)
        built.append(staging)
        first = arrive(gz[0], out, info[0], 1, "job")  # rank 0 sees both traces and claims the set ...
        found = count(staging)  # ... rank 1 has counted both too ...
        assert first.complete
        write_job_run(first.staging, out=out, name=first.name)  # ... and rank 0 builds the run meanwhile
        return found

    monkeypatch.setattr(rank_gather, "staged_traces", rank_0_finishes_while_rank_1_counts)
    late = arrive(gz[1], out, info[1], 1, "job")
    assert not late.complete
    assert [p.name for p in out.iterdir()] == ["job"]  # one run, no staging folder left
    assert sorted(p.name.split("-")[0] for p in (out / "job" / "traces").iterdir()) == ["rank0", "rank1"]


@pytest.mark.slow
def test_the_handler_under_torchrun_writes_one_run_for_the_job(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    import os
    import shutil

    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    if not shutil.which(torchrun):
        pytest.skip("torchrun is not beside this Python")
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")  # these machines' gloo needs the loopback named
    root = Path(__file__).resolve().parents[1]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]))
    (tmp_path / "ddp.py").write_text(DDP_HANDLER)
    out = tmp_path / "runs"
    subprocess.run([torchrun, "--standalone", "--nproc-per-node", "2", str(tmp_path / "ddp.py"), str(out)],
                   check=True, capture_output=True, text=True, timeout=240)
    assert [p.name for p in out.iterdir()] == ["job"]  # one run, no staging folder left
    run = out / "job"
    assert sorted(p.name.split("-")[0] for p in (run / "traces").iterdir()) == ["rank0", "rank1"]
    meta = read_meta(run)
    assert sorted(p["rank"] for p in meta.processes) == [0, 1] and meta.mode == "api"
    ev = read_timeline_parquet(run / "timeline.parquet").events
    assert sorted(ev["rank"].unique().tolist()) == [0, 1]
    steps = ev[(ev["kind"] == "range") & ev["name"].astype(str).str.startswith("ProfilerStep#")]
    assert steps.groupby("rank").size().to_dict() == {0: 2, 1: 2}
