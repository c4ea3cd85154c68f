"""The multi-process scenario ``ddp`` (scenarios/ddp.py) and its launcher (tracer/record/ranks.py): two gloo ranks on
the CPU, a rank that fails, a rank that hangs, and the nsys command line (a fake nsys)."""

from __future__ import annotations

import collections
import gzip
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import install_fake_nsys
from tracer import scenarios
from tracer.cli import main
from tracer.files.rundir import read_meta
from tracer.files.storage import read_timeline_parquet
from tracer.record import scenario_run
from tracer.record.ranks import launch, rank_devices, rank_environment

#: a job of a few seconds on two cores, nearly all of it the ranks' start-up
SMALL = ["-p", "ranks=2", "-p", "steps=3", "-p", "batch=16", "-p", "inputs=8", "-p", "hidden=16"]


@pytest.fixture(autouse=True)
def _loopback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")  # these machines' gloo needs the loopback named


def _names(trace: Path) -> collections.Counter[str]:
    with gzip.open(trace) as f:
        events = json.load(f)["traceEvents"]
    return collections.Counter(e.get("name", "") for e in events if e.get("ph") == "X")


def _info(trace: Path) -> dict[str, object]:
    with gzip.open(trace) as f:
        info: dict[str, object] = json.load(f)["distributedInfo"]
    return info


@pytest.mark.slow
def test_two_gloo_ranks_record_one_job_with_their_collectives(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["record", "ddp", "--device", "cpu", "--out", str(tmp_path), "-q", *SMALL]) == 0
    run = Path(capsys.readouterr().out.strip())
    assert [p.name for p in tmp_path.iterdir()] == [run.name], "a temporary directory was left behind"
    assert run.name.startswith("ddp-gloo-2ranks-")
    assert {p.name for p in run.iterdir()} == {"meta.json", "summary.json", "timeline.parquet", "traces"}
    traces = sorted((run / "traces").iterdir())
    assert [t.name.split("-")[0] for t in traces] == ["rank0", "rank1"]
    mask = os.umask(0)
    os.umask(mask)
    for p in (run, run / "traces", *traces, *run.iterdir()):  # (was 0700: private as its temporary directory)
        assert stat.S_IMODE(p.stat().st_mode) == (0o777 if p.is_dir() else 0o666) & ~mask, p
    for rank, trace in enumerate(traces):
        names = _names(trace)
        # torch 2.13 with gloo on the CPU writes no record_param_comms: DDP's bucket all-reduce is the c10d op on
        # the training thread and gloo's own range on its worker thread; one bucket (a tiny model), so one a step
        assert names["c10d::allreduce_"] == 3 and names["gloo:all_reduce"] == 3, names
        assert names["ddp/forward"] == names["ddp/backward"] == names["ddp/optimizer"] == 3
        assert names["ddp/train"] == 1 and names["ddp/warmup"] == 0  # only the profiled window
        info = _info(trace)
        assert info["rank"] == rank and info["world_size"] == 2 and info["backend"] == "gloo"
    meta = read_meta(run)
    assert meta.scenario == "ddp" and meta.mode == "processes" and meta.devices == ["cpu", "cpu"]
    assert meta.backend_details["distributed_backend"] == "gloo" and meta.exit_code == 0
    assert [(p["rank"], p["exit_code"], p["ended"]) for p in meta.processes] == [(0, 0, "exit"), (1, 0, "exit")]
    assert meta.missing_ranks == [] and all(c["ok"] for c in meta.checks.values()) and len(meta.checks) == 2
    assert set(meta.files) >= {"timeline.parquet", *(f"traces/{t.name}" for t in traces)}
    stored = read_timeline_parquet(run / "timeline.parquet")
    assert sorted(stored.events["rank"].unique().tolist()) == [0, 1]

    assert main(["summary", str(run), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    # per rank: each rank's training thread, and each rank's one profiled window
    assert {t["rank"] for t in summary["threads"] if t["ops"]} == {0, 1}
    assert {r["name"]: r["count"] for r in summary["ranges"]}["ddp/train"] == 2
    # the collectives matched across the two ranks: every step's all-reduce (and DDP's bucket rebuild broadcasts,
    # where the window caught them) found on both ranks, each with a straggler among them
    found = summary["collectives"]
    allreduce = [c for c in found if c["collective"] == "allreduce"]
    assert len(allreduce) == 3 and all(c["ranks"] == 2 and c["straggler"] in (0, 1) for c in found)
    assert {c["collective"] for c in found} <= {"allreduce", "broadcast"}
    assert [r["rank"] for r in summary["collective_ranks"]["ranks"]] == [0, 1]
    assert all(r["collectives"] == len(found) for r in summary["collective_ranks"]["ranks"])
    assert main(["summary", str(run)]) == 0
    assert "ddp/backward" in capsys.readouterr().out


@pytest.mark.slow
def test_a_failing_rank_is_named_and_the_other_rank_kept(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["record", "ddp", "--device", "cpu", "--out", str(tmp_path), *SMALL, "-p", "fail=1"])
    err = capsys.readouterr().err
    assert rc == 1
    line, = err.strip().splitlines()  # one line, no traceback
    assert "rank 1 (pid" in line and "rank 1 fails on purpose at step 1" in line, line
    (run,) = tmp_path.iterdir()
    assert line.endswith(str(run)) and not run.name.startswith(".")
    meta = read_meta(run)
    by_rank = {p["rank"]: p for p in meta.processes}
    assert by_rank[1]["exit_code"] == 1 and "fails on purpose" in by_rank[1]["last_line"]
    assert meta.exit_code == 1
    # rank 0 lost its peer in the middle of an all-reduce and failed too, saving its trace on the way out
    assert by_rank[0]["files"] and (run / "traces" / by_rank[0]["files"][0]).exists()
    assert 0 in read_timeline_parquet(run / "timeline.parquet").events["rank"].unique().tolist()
    # its summary says so too (only meta.json said it): each rank that failed, and the ranks with no trace
    for argv in (["summary", str(run)], ["summary", "--job", str(run)]):
        assert main(argv) == 0
        warnings = [w for w in capsys.readouterr().err.splitlines() if w.startswith("tracer: warning: ")]
        assert any("rank 1 exited with 1: " in w and "fails on purpose" in w for w in warnings), (argv, warnings)


def test_the_launcher_tears_down_the_job_when_a_rank_fails(tmp_path: Path) -> None:
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    dies = [sys.executable, "-c", "import sys; print('rank 1 gives up', file=sys.stderr); sys.exit(3)"]
    outcomes, wall = launch([sleeper, dies], ["cpu", "cpu"], tmp_path, timeout_s=60, grace_s=0.5)
    assert wall < 30
    assert (outcomes[1].exit_code, outcomes[1].last_line, outcomes[1].torn_down) == (3, "rank 1 gives up", False)
    assert (outcomes[0].exit_code, outcomes[0].torn_down, outcomes[0].timed_out) == (143, True, False)
    assert outcomes[0].describe().startswith(f"rank 0 (pid {outcomes[0].pid}) was torn down")


@pytest.mark.slow
def test_the_launcher_ends_a_job_that_hangs(tmp_path: Path) -> None:
    hangs = [sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                                   "print('stuck', flush=True); time.sleep(60)"]
    done = [sys.executable, "-c", "pass"]
    outcomes, wall = launch([hangs, done], ["cpu", "cpu"], tmp_path, timeout_s=1.0, grace_s=0.5)
    assert wall < 30
    # SIGTERM ignored: SIGKILL after the grace
    assert (outcomes[0].exit_code, outcomes[0].timed_out, outcomes[0].last_line) == (137, True, "stuck")
    assert outcomes[0].describe().startswith(f"rank 0 (pid {outcomes[0].pid}) hung")
    assert not outcomes[1].failed and not outcomes[1].timed_out


def test_the_ranks_get_torchruns_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GLOO_SOCKET_IFNAME")
    env = rank_environment(1, 4, 29500, base={"PATH": "/bin"})
    assert {k: env[k] for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")} == {
        "RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}
    assert env["GLOO_SOCKET_IFNAME"] in ("lo", "lo0")
    assert rank_environment(0, 2, 1, base={"GLOO_SOCKET_IFNAME": "eth9"})["GLOO_SOCKET_IFNAME"] == "eth9"
    # NCCL only with a GPU per rank; otherwise gloo on the CPU, and the run says why
    assert rank_devices(2, True, 2)[:2] == ("nccl", ["cuda:0", "cuda:1"])
    backend, devices, note = rank_devices(4, True, 1)
    assert (backend, devices) == ("gloo", ["cpu"] * 4) and note and "4 ranks but 1 GPU" in note
    assert rank_devices(2, False, 0) == ("gloo", ["cpu", "cpu"], None)


def test_a_rank_outside_a_job_is_refused_in_one_line() -> None:
    with pytest.raises(scenarios.ScenarioError, match="ddp runs one process per rank"):
        scenarios.run_scenario("ddp", "cpu", {})
    with pytest.raises(scenarios.ParamError, match="fail=x: write RANK"):
        from tracer.scenarios.ddp import parse_fail

        parse_fail("x")


@pytest.mark.parametrize(("param", "says"), [
    ("batch=15", "--param batch=15: must divide evenly over the 2 ranks (equal shards)"),
    ("fail=2", "--param fail=2: there is no rank 2 among 2 ranks"),
    ("skew=1", "--param skew=1.0: rank 0 would take 256 of each minibatch's 256 rows, leaving 0 for the other 1 "
               "rank(s): every rank needs at least one (lower skew, or raise batch)"),
    ("fail=1:later", "--param fail=1:later: write RANK or RANK:raise or RANK:hang (or none)"),
])
def test_bad_parameters_are_refused_before_any_rank_starts(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                          param: str, says: str) -> None:
    assert main(["record", "ddp", "--device", "cpu", "--out", str(tmp_path), "-p", "ranks=2", "-p", param]) == 2
    assert capsys.readouterr().err.strip() == f"tracer: error: {says}"
    assert not any(tmp_path.iterdir())


def test_tracer_scenarios_lists_ddp_with_its_parameters(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["scenarios", "--json"]) == 0
    (ddp,) = [s for s in json.loads(capsys.readouterr().out) if s["name"] == "ddp"]
    assert ddp["multi_process"] is True
    assert {"ranks", "steps", "batch", "timeout", "fail"} <= {p["name"] for p in ddp["params"]}
    assert main(["scenarios", "ddp"]) == 0
    out = capsys.readouterr().out
    assert "ranks" in out and "DistributedDataParallel" in out


@pytest.mark.slow
def test_the_nsys_backend_profiles_the_launcher(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    # one report of the whole job: nsys runs the launcher and follows the ranks it starts (a fake nsys here,
    # which runs the command and exports tests/data's real report; on the CPU the ranks' CUDA range is empty)
    install_fake_nsys(tmp_path, monkeypatch, capture_range=False)
    monkeypatch.setattr(scenario_run, "NSYS_NEEDS_GPU", False)
    rc = main(["record", "ddp", "--device", "cpu", "--backend", "nsys", "--out", str(tmp_path / "runs"), "-q",
               *SMALL])
    assert rc == 0, capsys.readouterr().err
    (run,) = (tmp_path / "runs").iterdir()
    assert {p.name for p in run.iterdir()} == {"report.nsys-rep", "report.sqlite", "timeline.parquet", "meta.json",
                                              "summary.json"}
    meta = read_meta(run)
    assert meta.backend == "nsys" and meta.exit_code == 0 and meta.missing_ranks == []
    assert [(p["rank"], p["ended"], p["exit_code"]) for p in meta.processes] == [(0, "exit", 0), (1, "exit", 0)]
    assert meta.checks and all(c["ok"] for c in meta.checks.values())


@pytest.mark.slow
def test_sigterm_to_the_launcher_stops_every_rank(tmp_path: Path) -> None:
    # a recorder told to stop (SIGTERM) leaves no rank running behind it
    code = (
        "import os, signal, sys, threading, time\n"
        "from pathlib import Path\n"
        "from tracer.record.ranks import launch\n"
        "from tracer.sigterm import Terminated\n"
        "sleeper = [sys.executable, '-c', 'import time; time.sleep(60)']\n"
        "threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGTERM)).start()\n"
        "try:\n"
        "    launch([sleeper, sleeper], ['cpu', 'cpu'], Path(sys.argv[1]), timeout_s=60, grace_s=0.5)\n"
        "except Terminated:\n"
        "    print('stopped')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])})
    assert proc.stdout.strip() == "stopped", proc.stderr
    assert proc.returncode == 0


_TERM_MID_DDP = """
import sys
import tracer.record.ranks as rr
from tracer.cli import run

# Each rank: a sleeper marked by sys.argv[1]; rank 1, once started, sends SIGTERM to the recorder (its parent),
# as a batch system's time limit would, while the recorder waits on both ranks.
SLEEPER = ("import os, signal, time\\n"
           "if os.environ['RANK'] == '1': os.kill(os.getppid(), signal.SIGTERM)\\n"
           "time.sleep(120)\\n")
rr.rank_command = lambda *a, **k: [sys.executable, "-c", SLEEPER, sys.argv[1]]
sys.argv = ["tracer", "record", "ddp", *sys.argv[2:]]
run()
"""


def _running(marker: str) -> list[int]:
    """The pids of this machine's processes whose command line holds ``marker``."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and marker.encode() in (proc / "cmdline").read_bytes().split(b"\0"):
                found.append(int(proc.name))
        except OSError:  # (ended meanwhile)
            continue
    return found


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="lists processes from /proc (Linux)")
def test_sigterm_mid_record_ddp_is_one_line_stops_the_ranks_and_leaves_nothing(tmp_path: Path) -> None:
    # `tracer record ddp` told to stop while its ranks run: the command's one line and exit code (as for every
    # other command: tracer.sigterm), no rank left running, no half-written run
    marker = f"tracer-test-rank-{os.getpid()}-{tmp_path.name}"
    proc = subprocess.run([sys.executable, "-c", _TERM_MID_DDP, marker, *SMALL, "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 128 + 15, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == "tracer: terminated (SIGTERM)"
    assert "Traceback" not in proc.stderr
    assert _running(marker) == []
    assert list(tmp_path.iterdir()) == []
