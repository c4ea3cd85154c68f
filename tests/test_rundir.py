"""The run directory (tracer.files.rundir): its typed meta.json (RunMeta, a tolerant reader that writes back what it
read), derive(), and the recorder writing the record and then calling derive once."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import orjson
import pytest

import tracer
from tests.test_scenarios import SMALL
from tracer import scenarios
from tracer.errors import TraceFormatError, UsageError
from tracer.files import rundir
from tracer.files.rundir import RunMeta
from tracer.record import scenario as rec
from tracer.record.derive import derive

EXAMPLES = sorted(p for p in (Path(tracer.__file__).parent / "examples").iterdir() if p.is_dir())

#: what `tracer record` writes in meta.json, in this order (tests/test_record.py checks the values)
RECORDER_KEYS = [
    "schema_version", "kind", "scenario", "variant", "variants", "params", "mode", "devices", "lanes", "gpu_names",
    "torch_version", "cuda_version", "wall_times_s", "unprofiled_times", "wall_time_samples_s", "profiled_window_s",
    "intra_op_threads", "checks", "derived", "notes", "phases", "backend", "backend_details", "created",
    "environment", "files", "stages_s",
]


def _example(kind: str = "torch") -> Path:
    return next(p for p in EXAMPLES if json.loads((p / "meta.json").read_text())["backend"] == kind)


# ----- RunMeta


def test_a_new_run_meta_writes_the_recorders_keys_and_not_the_optional_ones() -> None:
    assert list(RunMeta().to_dict()) == RECORDER_KEYS
    assert "dropped_files" in RunMeta(dropped_files=["report.nsys-rep"]).to_dict()
    assert RunMeta(speedup=1.5).to_dict()["speedup"] == 1.5


@pytest.mark.parametrize("run", EXAMPLES, ids=lambda p: p.name)
def test_every_bundled_meta_json_is_read_typed_and_written_back_byte_for_byte(run: Path) -> None:
    raw = (run / "meta.json").read_bytes()
    meta = RunMeta.from_dict(orjson.loads(raw))
    assert meta.extra == {}, "a field the recorder writes is missing from RunMeta"
    assert (meta.scenario or meta.command) and meta.backend in ("torch", "nsys") and meta.created.endswith("Z")
    assert all(isinstance(v, float) for v in meta.derived.values())
    assert rundir.dumps(meta.to_dict()) == raw.rstrip(b"\n")


def test_an_old_or_foreign_meta_json_is_read_with_defaults_and_written_back_as_it_was() -> None:
    foreign = {"tool": "mine", "scenario": "s", "variant": 3, "speedup": 2.5, "derived": {"x": 1}, "deep": {"a": 1}}
    meta = RunMeta.from_dict(foreign)
    assert meta.scenario == "s" and meta.speedup == 2.5 and meta.derived == {"x": 1.0}
    assert meta.variant == "" and meta.extra == {"tool": "mine", "variant": 3, "deep": {"a": 1}}  # wrong type: kept
    assert meta.mode == "" and meta.wall_time_samples_s == {} and meta.lane_count is None  # missing: defaults
    assert meta.to_dict() == {**foreign, "derived": {"x": 1.0}}  # nothing added, order kept
    meta.files = {"trace.json.gz": 3}
    assert list(meta.to_dict()) == [*foreign, "files"]  # set since: written, after what was read
    assert RunMeta.from_dict(["not", "an", "object"]) == RunMeta()
    assert RunMeta.from_dict({"params": {"lanes": 4}}).lane_count == 4


def test_read_meta_says_what_is_wrong(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="not a run directory written by tracer record"):
        rundir.read_meta(tmp_path)
    (tmp_path / "meta.json").write_text("{nope")
    with pytest.raises(TraceFormatError, match="invalid JSON"):
        rundir.read_meta(tmp_path)


# ----- derive


@pytest.mark.parametrize("backend", ["torch", "nsys"])
def test_derive_remakes_timeline_and_summary_and_touches_only_meta_files(tmp_path: Path, backend: str) -> None:
    from tracer.files.storage import read_timeline_parquet

    src = _example(backend)
    run = tmp_path / src.name
    shutil.copytree(src, run)
    (run / "timeline.parquet").unlink()
    (run / "summary.json").unlink()
    before = RunMeta.from_dict(json.loads((src / "meta.json").read_text()))

    made = derive(run)
    assert made.trace == run / ("trace.json.gz" if backend == "torch" else "report.sqlite.gz")
    assert read_timeline_parquet(run / "timeline.parquet").events.equals(
        read_timeline_parquet(src / "timeline.parquet").events
    )
    assert json.loads((run / "summary.json").read_text()) == made.summary == json.loads((src / "summary.json").read_text())
    after = rundir.read_meta(run)
    assert after.files == rundir.file_sizes(run) and set(after.files) == set(before.files)
    after.files = before.files
    assert after == before  # nothing else changed
    assert not [p for p in run.iterdir() if p.name.startswith(".")], "a temporary file was left"

    stages: dict[str, float] = {"workload": 1.0}
    derive(run, stages=stages)
    assert set(stages) == {"workload", "parse", "write"} and rundir.read_meta(run).stages_s == stages


def test_derive_needs_meta_and_a_trace(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="not a run directory"):
        derive(tmp_path)
    (tmp_path / "meta.json").write_text("{}")
    with pytest.raises(UsageError, match="holds no trace"):
        derive(tmp_path)


def test_refresh_run_is_derive(tmp_path: Path) -> None:
    run = tmp_path / "r"
    shutil.copytree(_example(), run)
    assert rec.refresh_run(run) == json.loads((run / "summary.json").read_text())


def test_record_writes_the_record_then_derives_once_and_checks_the_scenario_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: record() resolved the scenario and its devices twice (scenarios.prepare, once to check and
    again to choose the profiler's threads), and wrote timeline and summary with its own copy of the end of
    refresh_run."""
    seen: list[set[str]] = []
    real_derive, real_prepare = derive, scenarios.prepare
    prepared: list[str] = []

    def spy_derive(run_dir, **kw):
        seen.append({p.name for p in Path(run_dir).iterdir()})
        return real_derive(run_dir, **kw)

    def spy_prepare(name, *args, **kw):
        prepared.append(name)
        return real_prepare(name, *args, **kw)

    monkeypatch.setattr("tracer.record.scenario_run.derive", spy_derive)
    monkeypatch.setattr(scenarios, "prepare", spy_prepare)
    run = rec.record("independent-ops", device="cpu", out=tmp_path, params=SMALL["independent-ops"])
    assert seen == [{"trace.json.gz", "meta.json"}]  # the record, and nothing derived yet
    assert prepared == ["independent-ops"]
    assert {p.name for p in run.path.iterdir()} == {"trace.json.gz", "meta.json", "timeline.parquet", "summary.json"}
    meta = json.loads((run.path / "meta.json").read_text())
    # and the optional keys of a recording: caveats where the machine could not show something (e.g. when other
    # processes kept it busy), the host's load where the platform says it
    cut = RECORDER_KEYS.index("notes") + 1
    keys = [*RECORDER_KEYS[:cut], *(["caveats"] if "caveats" in meta else []), "host_load", *RECORDER_KEYS[cut:]]
    assert list(meta) == keys and meta == run.meta
    assert set(meta["stages_s"]) == {"profiled", "workload", "export", "parse", "write"}
    assert meta["files"] == rundir.file_sizes(run.path)


# ----- the dashboard reads RunMeta's fields, and guesses no more


def test_the_dashboard_reads_created_and_no_other_date_key(tmp_path: Path) -> None:
    import os

    from tracer.dashboard.data import RunInfo, run_date

    run = tmp_path / "r"
    run.mkdir()
    os.utime(run, (1_800_000_000, 1_800_000_000))
    info = RunInfo("r", run, "r", "path", {"created": "2026-12-02T16:13:50Z", "timestamp": 1.7e9})
    assert run_date(info) == "2026-12-02 16:13"
    # a foreign key is not a date the dashboard guesses at: the directory's own time is shown instead, said so
    assert run_date(RunInfo("r", run, "r", "path", {"timestamp": 1.7e9})) == "2027-01-15 08:00 (file's date)"


def test_the_dashboard_takes_speedups_from_speedup_or_derived_not_from_nested_dicts() -> None:
    from tracer.dashboard.data import speedups

    meta = {"result": {"speedup": 9.0}, "derived": {"speedup (a / b)": 2.0, "ratio": 0.5}}
    assert speedups(meta) == speedups(RunMeta.from_dict(meta)) == [(2.0, "a / b")]
    assert speedups({**meta, "speedup": 1.5}) == [(1.5, "")]
    assert speedups({"speedup": float("nan"), "derived": {"speedup": True}}) == []
