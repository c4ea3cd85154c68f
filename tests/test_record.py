"""`tracer record` and `tracer scenarios`: every scenario recorded on the CPU at small sizes, complete run
directories, phase names in trace and timeline, atomicity (Ctrl-C, crash, failed check), the nsys back end."""

from __future__ import annotations

import gzip
import json
import os
import re
import socket
import stat
from pathlib import Path

import pytest

import tracer
from tests.conftest import install_fake_nsys, run_cli
from tests.test_scenarios import MULTI_PROCESS, NAMES, SMALL
from tracer import scenarios
from tracer.cli import main
from tracer.errors import ToolMissingError, UsageError
from tracer.files.rundir import RUN_SCHEMA_VERSION
from tracer.record import scenario as rec
from tracer.record import scenario_run
from tracer.record.profiler import quiet_kineto
from tracer.record.run import ScenarioFailedError

RUN_FILES = {"trace.json.gz", "timeline.parquet", "meta.json", "summary.json"}


def _params(name: str, **extra: str) -> list[str]:
    out: list[str] = []
    for k, v in {**SMALL[name], **extra}.items():
        out += ["-p", f"{k}={v}"]
    return out


def _record(tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, *args: str) -> Path:
    rc = main(["record", name, "--device", "cpu", "--out", str(tmp_path), "-q", *args])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    return Path(captured.out.strip())


def _trace_names(path: Path) -> set[str]:
    with gzip.open(path) as f:
        trace = json.load(f)
    return {e.get("name", "") for e in trace["traceEvents"]}


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_every_scenario_records_a_complete_run(tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str) -> None:
    from tracer.analysis.summary import summarize
    from tracer.files.storage import read_timeline_parquet

    run = _record(tmp_path, capsys, name, *_params(name, lanes="3"))
    assert run.parent == tmp_path
    assert [p.name for p in tmp_path.iterdir()] == [run.name], "a temporary directory was left behind"
    assert re.fullmatch(rf"{name}-cpu-threads-\d{{8}}-\d{{6}}", run.name)
    assert {p.name for p in run.iterdir()} == RUN_FILES

    meta = json.loads((run / "meta.json").read_text())
    assert meta["schema_version"] == RUN_SCHEMA_VERSION
    assert meta["scenario"] == name and meta["variant"] == "all" and meta["backend"] == "torch"
    assert meta["mode"] == "cpu-threads" and meta["devices"] == ["cpu"] and len(meta["lanes"]) == 3
    assert meta["params"]["lanes"] == 3
    assert meta["checks"] and all(c["ok"] for c in meta["checks"].values())
    assert meta["wall_times_s"] and all(v > 0 for v in meta["wall_times_s"].values())
    assert meta["torch_version"] and re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", meta["created"])
    assert set(meta["files"]) == RUN_FILES - {"meta.json"}
    assert meta["files"]["trace.json.gz"] == (run / "trace.json.gz").stat().st_size
    assert meta["backend_details"]["profile_all_threads"] is True
    assert meta["intra_op_threads"] == 1
    # no derived figure that cannot be right: finite numbers, shares within [0, 1], none of the GPU-only shares
    for k, v in meta["derived"].items():
        assert isinstance(v, float) and v == v and abs(v) != float("inf"), (k, v)
        assert "hidden" not in k, f"{k}: a copy-time share is meaningless on the CPU"
        if "share" in k:
            assert 0.0 <= v <= 1.0, (k, v)
    host = socket.gethostname()
    if len(host) >= 4:
        assert host not in (run / "meta.json").read_text()

    # every phase timed inside the profiled window is a range in the trace and in the timeline
    profiled = [f"{name}/{k}" for k in meta["wall_times_s"] if k not in meta["unprofiled_times"]]
    assert profiled
    assert set(profiled) <= _trace_names(run / "trace.json.gz")
    timeline = read_timeline_parquet(run / "timeline.parquet")
    ranges = set(timeline.events.loc[timeline.events["kind"] == "range", "name"].astype(str))
    assert set(profiled) <= ranges
    # setup, warm-up and the checks stay out of the trace
    assert not {f"{name}/setup", f"{name}/warmup", f"{name}/check"} & ranges

    summary = json.loads((run / "summary.json").read_text())
    assert summary["format"] == "kineto" and summary["devices"] == {}
    assert summary["span_ns"] == summarize(timeline)["span_ns"]

    mode = stat.S_IMODE(run.stat().st_mode)
    assert mode & 0o055, "run directory left private (0700)"


def test_thread_lanes_show_up_as_threads_in_the_timeline(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tracer.files.storage import read_timeline_parquet

    run = _record(tmp_path, capsys, "dependency-graph", *_params("dependency-graph", lanes="3"))
    ev = read_timeline_parquet(run / "timeline.parquet").events
    mixes = ev[(ev["kind"] == "range") & ev["name"].astype(str).str.startswith("dependency-graph/mix")]
    assert len(mixes) == 6  # three mix tasks, serial and parallel
    assert mixes["tid"].nunique() >= 3  # the parallel ones ran on the three lanes' threads


def test_one_variant_per_run_names_the_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = _record(tmp_path, capsys, "compute-copy", *_params("compute-copy", variant="side-stream"))
    assert run.name.startswith("compute-copy-side-stream-cpu-threads-")
    meta = json.loads((run / "meta.json").read_text())
    assert meta["variant"] == "side-stream" and meta["variants"] == ["side-stream"]
    names = _trace_names(run / "trace.json.gz")
    assert "compute-copy/run+copy-side-stream" in names
    assert "compute-copy/run+copy-blocking" not in names
    # the reference timings are in meta.json but not in the trace
    assert meta["unprofiled_times"] == ["run", "copy-pinned-side-stream", "run+copy-side-stream-unprofiled"]
    assert "compute-copy/run" not in names and "compute-copy/run+copy-side-stream-unprofiled" not in names
    assert all(len(meta["wall_time_samples_s"][k]) == 5 for k in meta["unprofiled_times"])  # repeats' default


def test_cpu_compute_copy_saves_no_copy_time_hidden_and_says_why(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    # The run printed "blocking: copy time hidden 100%" beside a 68.4 ms reference and 10 ms run+copy.
    run = _record(tmp_path, capsys, "compute-copy", *_params("compute-copy"))
    meta = json.loads((run / "meta.json").read_text())
    assert not [k for k in meta["derived"] if "hidden" in k]
    assert any("the CPU cannot show copies hiding behind compute" in c for c in meta["caveats"])
    assert meta["host_load"]["cores"] >= 1  # and how busy the machine was
    t = meta["wall_times_s"]
    for v in ("blocking", "non-blocking", "side-stream"):
        ratio = meta["derived"].get(f"{v}: ratio run+copy / (run + copy)")
        whole = t[f"run+copy-{v}-unprofiled"]
        if ratio is None:  # left out: only when the whole was shorter than a part, and a note says so
            assert whole < max(t["run"], t[f"copy-{'pinned-side-stream' if v == 'side-stream' else v}"]) * 0.9
            assert any(n.startswith(f"left out {v}: ratio") for n in meta["notes"])
        else:
            assert ratio >= 0.45  # run+copy is at least as long as run alone, less the noise allowed


def test_both_reports_say_which_times_are_medians_and_print_the_notes(tmp_path: Path) -> None:
    from rich.console import Console

    from tracer.cli.record import render_run
    from tracer.record.scenario import plain_report

    run = rec.record("compute-copy", device="cpu", out=tmp_path,
                     params={**SMALL["compute-copy"], "variant": "side-stream", "repeats": "3"})
    console = Console(width=200, record=True)
    for r in render_run(run.meta, run.summary, run.path):
        console.print(r)
    for text in (console.export_text(), plain_report(run.meta, run.summary, run.path)):
        assert re.search(r"run +[\d.]+ +\(?reference, not profiled; median of 3", text), text
        assert re.search(r"run\+copy-side-stream +[\d.]+ *\n", text), text  # the profiled pass: one sample
        # the caveat comes before any figure, the ratio after it as a side note, and the host's load is said
        caveat = text.index("caveat: the CPU cannot show copies hiding behind compute")
        assert caveat < text.index("ratio run+copy / (run + copy)") and "copy time hidden  " not in text
        assert "host load during the run: " in text


def test_quiet_kineto_drops_only_the_usdt_markers(capfd: pytest.CaptureFixture[str]) -> None:
    with quiet_kineto():
        os.write(2, b"USDT:2026-12-03 10:31:55 9445:9445 SyncActivityProfilerHandler.cpp:52] profiler_start\n")
        os.write(2, b"ERROR: something that matters\n")
        os.write(2, b"USDT:2026-12-03 10:31:55 9445:9445 SyncActivityProfilerHandler.cpp:59] profiler_stop\n")
    err = capfd.readouterr().err
    assert err == "ERROR: something that matters\n"


def test_two_runs_in_the_same_second_get_distinct_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import datetime as dt

    fixed = dt.datetime(2026, 12, 2, 12, 0, 0, tzinfo=dt.timezone.utc)

    class Frozen(dt.datetime):
        @classmethod
        def now(cls, tz=None):
            return fixed

    # Replace the module as tracer.record.scenario_run sees it, never the attribute of the real datetime module: a
    # global datetime.datetime subclass crashed pandas' C code imported after it (a segfault when run alone).
    import types

    monkeypatch.setattr(scenario_run, "_dt", types.SimpleNamespace(datetime=Frozen, timezone=dt.timezone))
    params = SMALL["multi-device"]
    a = rec.record("multi-device", device="cpu", out=tmp_path, params=params).path
    b = rec.record("multi-device", device="cpu", out=tmp_path, params=params).path
    assert a.name != b.name and b.name == a.name + "-2"


def test_summary_reads_a_run_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = _record(tmp_path, capsys, "multi-device", *_params("multi-device"))
    assert main(["summary", "--json", str(run)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert "multi-device/together" in {r["name"] for r in out["ranges"]}


def test_record_prints_times_speedup_and_checks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["record", "multi-device", "--device", "cpu", "--out", str(tmp_path), *_params("multi-device")]) == 0
    out = capsys.readouterr().out
    for text in ("alone-0", "together", "speedup (sum alone / together)", "checks passed", "run written to"):
        assert text in out, out


# ---- nothing half-written -------------------------------------------------------------------------------------


def test_ctrl_c_leaves_nothing(tmp_path: Path) -> None:
    def interrupt(msg: str) -> None:
        if msg == "multi-device/together":
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        rec.record("multi-device", device="cpu", out=tmp_path, params=SMALL["multi-device"], progress=interrupt)
    assert list(tmp_path.iterdir()) == []


_TERM_MID_RECORD = """
import os, signal, sys
import tracer.record.scenario as rec
from tracer.cli import run

def mid_record(msg):  # the scenario's "together" phase begins: SIGTERM, as a batch system's time limit sends
    if msg == "multi-device/together":
        os.kill(os.getpid(), signal.SIGTERM)

record = rec.record
rec.record = lambda *a, **k: record(*a, **{**k, "progress": mid_record})
sys.argv = ["tracer", "record", *sys.argv[1:]]
run()
"""


@pytest.mark.slow
def test_sigterm_mid_record_is_one_line_and_leaves_nothing(tmp_path: Path) -> None:
    import subprocess
    import sys

    params = [a for k, v in SMALL["multi-device"].items() for a in ("--param", f"{k}={v}")]
    proc = subprocess.run([sys.executable, "-c", _TERM_MID_RECORD, "multi-device", "--device", "cpu",
                           "--out", str(tmp_path), *params], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 128 + 15, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == "tracer: terminated (SIGTERM)"
    assert "Traceback" not in proc.stderr
    assert list(tmp_path.iterdir()) == []  # the run being written (a temporary folder) was removed


def test_a_crashing_scenario_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tracer.scenarios import multi_device

    def boom(*args: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(multi_device, "products", boom)
    with pytest.raises(RuntimeError, match="boom"):
        rec.record("multi-device", device="cpu", out=tmp_path, params=SMALL["multi-device"])
    assert list(tmp_path.iterdir()) == []


def test_a_failed_check_is_one_line_and_leaves_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from tracer.scenarios import multi_device

    real = multi_device.products
    calls: list[int] = []

    def wrong_when_together(lane, x, n):  # calls 1-2 warm up, 3-4 run alone, 5-6 together
        calls.append(n)
        return real(lane, x, n) + (len(calls) > 4)

    monkeypatch.setattr(multi_device, "products", wrong_when_together)
    rc = main(["record", "multi-device", "--device", "cpu", "--out", str(tmp_path), *_params("multi-device")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2
    assert len(err) == 1
    assert err[0].startswith("tracer: error: scenario multi-device: correctness check failed: together == alone")
    assert list(tmp_path.iterdir()) == []


# ---- bad input: one line, exit 2 ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["nope"], "tracer: error: no scenario called 'nope'; choose one of multi-device"),
        (["multi-device", "-p", "m=1"], "tracer: error: scenario multi-device has no parameter 'm'"),
        (["multi-device", "-p", "n"], "tracer: error: --param 'n': write it as NAME=VALUE"),
        (["multi-device", "-p", "n=x"], "tracer: error: --param n=x: expected int"),
        (["multi-device", "--backend", "perf"], "tracer: error: --backend: unknown backend 'perf'"),
        (["compute-copy", "-p", "variant=peer"], "tracer: error: variant peer of compute-copy needs two or more GPUs"),
    ],
)
def test_bad_input_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str],
                               message: str) -> None:
    rc = main(["record", *args, "--device", "cpu", "--out", str(tmp_path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2
    assert len(err) == 1 and err[0].startswith(message), err
    assert not tmp_path.exists() or list(tmp_path.iterdir()) == []


def test_out_that_is_a_file_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # `--out afile` used to end in a FileExistsError traceback from mkdir (exit 1)
    (tmp_path / "afile").write_text("")
    rc = main(["record", "multi-device", "--device", "cpu", "--out", str(tmp_path / "afile"), "-p", "n=1"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2
    assert err == [f"tracer: error: {tmp_path / 'afile'}: is a file, not a directory"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="needs a machine without CUDA")
def test_asking_for_a_gpu_here_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["record", "multi-device", "--device", "cuda", "--out", str(tmp_path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1
    assert "has no usable CUDA GPU" in err[0] and "--device cpu" in err[0]


def test_nsys_missing_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    rc = main(["record", "compute-copy", "--backend", "nsys", "--out", str(tmp_path / "runs")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1
    assert err[0].startswith("tracer: error: --backend nsys: nsys (Nsight Systems) is not on PATH")
    assert not (tmp_path / "runs").exists()
    with pytest.raises(ToolMissingError):
        rec.record("compute-copy", backend="nsys", out=tmp_path)


@pytest.fixture
def fake_nsys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return install_fake_nsys(tmp_path, monkeypatch, capture_range=True)


@pytest.mark.slow
def test_nsys_backend_writes_report_sqlite_and_timeline(tmp_path: Path, fake_nsys: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scenario_run, "NSYS_NEEDS_GPU", False)
    seen: list[str] = []
    run = rec.record("compute-copy", device="cpu", out=tmp_path / "runs", backend="nsys",
                     params={**SMALL["compute-copy"], "variant": "side-stream"}, progress=seen.append)
    assert {p.name for p in run.path.iterdir()} == {"report.nsys-rep", "report.sqlite", "timeline.parquet",
                                                    "meta.json", "summary.json"}
    assert "compute-copy/run+copy-side-stream" in seen  # the child's phases reach the progress display
    meta = run.meta
    assert meta["backend"] == "nsys" and meta["backend_details"]["nsys_version"].endswith("fake")
    assert all(c["ok"] for c in meta["checks"].values()) and "run+copy-side-stream" in meta["wall_times_s"]
    assert run.summary["format"] == "nsys" and run.summary["devices"]["0"]["memcpys"] == 10


def test_nsys_backend_needs_a_gpu(tmp_path: Path, fake_nsys: Path) -> None:
    with pytest.raises(UsageError, match="nsys traces CUDA and NVTX and needs a GPU"):
        rec.record("compute-copy", device="cpu", out=tmp_path / "runs", backend="nsys")


@pytest.mark.slow
def test_nsys_child_check_failure_leaves_nothing(tmp_path: Path, fake_nsys: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scenario_run, "NSYS_NEEDS_GPU", False)
    # the child is another process: make its check fail through a parameter that breaks nothing but the check
    with pytest.raises(ScenarioFailedError, match="the child process failed|correctness check failed"):
        rec.record("mlp-data-parallel", device="cpu", out=tmp_path / "runs", backend="nsys",
                   params={**SMALL["mlp-data-parallel"], "lr": "1e9"})
    assert not (tmp_path / "runs").exists() or list((tmp_path / "runs").iterdir()) == []


# ---- the console script and python -m tracer ------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("module", [False, True])
def test_tracer_record_as_a_user_runs_it(tmp_path: Path, module: bool) -> None:
    proc = run_cli("record", "small-ops", "--device", "cpu", "--out", str(tmp_path), *_params("small-ops"),
                   module=module, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "checks passed" in proc.stdout
    # torch 2.13's CPU build printed "USDT:... profiler_start" and "... profiler_stop" around every recording
    assert "USDT" not in proc.stdout and "USDT" not in proc.stderr, proc.stderr
    (run,) = tmp_path.iterdir()
    assert {p.name for p in run.iterdir()} == RUN_FILES


def test_tracer_scenarios_lists_them(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["scenarios"]) == 0
    out = capsys.readouterr().out
    for s in scenarios.all_scenarios():
        assert s.name in out
    assert main(["scenarios", "compute-copy"]) == 0
    out = capsys.readouterr().out
    assert "side-stream" in out and "pinned" in out and "variant" in out
    assert main(["scenarios", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [s["name"] for s in listed] == NAMES + MULTI_PROCESS
    assert {"name", "cpu", "gpu", "help", "type"} <= set(listed[0]["params"][0])
    assert main(["scenarios", "nope"]) == 2


@pytest.mark.slow
def test_compact_run_gzips_the_sqlite_and_drops_a_big_report(tmp_path: Path, fake_nsys: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from tracer.parsers import load_trace

    monkeypatch.setattr(scenario_run, "NSYS_NEEDS_GPU", False)
    run = rec.record("multi-device", device="cpu", out=tmp_path / "runs", backend="nsys", params=SMALL["multi-device"])
    before = load_trace(run.path / "report.sqlite").events
    files = rec.compact_run(run.path, max_report_bytes=4)
    assert set(files) == {"report.sqlite.gz", "timeline.parquet", "summary.json"}
    meta = json.loads((run.path / "meta.json").read_text())
    assert meta["files"] == files and meta["dropped_files"] == ["report.nsys-rep"]
    assert load_trace(run.path / "report.sqlite.gz").events.equals(before)
    assert rec.compact_run(run.path) == files  # a second time changes nothing
    with pytest.raises(UsageError, match="not a run directory"):
        rec.compact_run(tmp_path)


def test_refresh_run_rederives_timeline_and_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tracer.files.storage import read_timeline_parquet

    run = _record(tmp_path, capsys, "multi-device", *_params("multi-device"))
    before = read_timeline_parquet(run / "timeline.parquet").events
    (run / "timeline.parquet").write_bytes(b"stale")
    (run / "summary.json").write_text("{}")
    summary = rec.refresh_run(run)
    assert read_timeline_parquet(run / "timeline.parquet").events.equals(before)
    assert json.loads((run / "summary.json").read_text()) == summary and summary["format"] == "kineto"
    with pytest.raises(UsageError, match="not a run directory"):
        rec.refresh_run(tmp_path)


def test_bundled_examples_are_current(tmp_path: Path) -> None:
    """The bundled runs' timelines are what today's parsers make of their traces (else: refresh_run them)."""
    from tracer.files.storage import read_timeline_parquet
    from tracer.parsers import load_trace

    examples = Path(tracer.__file__).parent / "examples"
    runs = sorted(p for p in examples.iterdir() if p.is_dir())
    assert len(runs) >= 7
    for run in runs:
        meta = json.loads((run / "meta.json").read_text())
        assert all(c["ok"] for c in meta["checks"].values())
        assert set(meta["files"]) == {p.name for p in run.iterdir()} - {"meta.json"}
        assert sum(p.stat().st_size for p in run.iterdir()) < 1_000_000, run.name
        source = run / ("trace.json.gz" if meta["backend"] == "torch" else "report.sqlite.gz")
        fresh = load_trace(source, cache=False).events
        stored = read_timeline_parquet(run / "timeline.parquet").events
        assert fresh.equals(stored), f"{run.name}: run tracer.record.scenario.refresh_run on it"


def test_record_output_tells_the_wall_time_estimate_from_the_timeline_overlap() -> None:
    # The bundled blocking run printed "blocking: copy time hidden 14%" under "Derived" beside "hidden 0%" per
    # GPU, with nothing saying the first is a wall-time estimate and the second the timeline's measurement.
    from rich.console import Console

    from tracer.cli.record import render_run

    run = Path(tracer.__file__).parent / "examples" / "compute-copy-blocking-streams-20261202-161350"
    meta = json.loads((run / "meta.json").read_text())
    summary = json.loads((run / "summary.json").read_text())
    console = Console(width=200, record=True)
    for r in render_run(meta, summary, run):
        console.print(r)
    text = console.export_text()
    assert "Derived from the wall times" in text and "blocking: copy time hidden" in text
    assert "overlap = copy time hidden behind compute, on the timeline" in text


@pytest.mark.gpu
def test_a_scenario_recorded_on_a_gpu_has_its_kernels_and_copies_there(tmp_path: Path) -> None:
    """On a machine with a GPU (skipped elsewhere): the side-stream scenario's kernels and device-to-host copies
    are on GPU 0, and some copy time is hidden behind compute."""
    run = rec.record("compute-copy", device="cuda:0", out=tmp_path / "runs",
                     params={**SMALL["compute-copy"], "variant": "side-stream"})
    gpu = run.summary["devices"]["0"]
    assert gpu["kernels"] > 0 and gpu["memcpys"] > 0
    assert 0 < gpu["overlap_ns"] <= min(gpu["compute_ns"], gpu["copy_ns"])
