"""TraceMeta.extra's keys are typed (tracer.timeline.meta.TraceExtra); what a stored meta holds besides them is kept
in ``other`` and written back in its place, so that a meta read and written again keeps its bytes."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.conftest import DATA
from tracer.exporters import export_timeline
from tracer.files.storage import read_timeline_parquet, write_timeline_parquet
from tracer.job.load import load_job
from tracer.parsers import load_trace
from tracer.timeline import Timeline, TraceMeta, empty_events
from tracer.timeline.meta import extra_types, fits_extra


def _bytes(meta: TraceMeta) -> bytes:
    return orjson.dumps(meta.to_dict(), default=str)


@pytest.mark.parametrize("name", ["pair_kineto.json.gz", "pair.sqlite.gz", "graph_whole.sqlite.gz",
                                  "graph_kineto.json.gz", "nsys_two_ranks.sqlite.gz"])
def test_every_key_a_parser_writes_is_typed_and_read_back_as_it_was(name: str) -> None:
    meta = load_trace(DATA / name, cache=False).meta
    assert set(meta.extra) <= set(extra_types()) and not meta.other
    back = TraceMeta.from_dict(orjson.loads(_bytes(meta)))
    assert not back.other, "a key the parser writes is not TraceExtra's, or not of its type"
    assert _bytes(back) == _bytes(meta) and list(back.extra) == list(meta.extra)


def test_a_jobs_keys_are_typed_too(tmp_path: Path) -> None:
    job = load_job(sorted((DATA / "comm").glob("*.json.gz")), load=lambda p: load_trace(p, cache=False))
    assert {"parts", "ranks"} <= set(job.meta.extra)
    back = TraceMeta.from_dict(orjson.loads(_bytes(job.meta)))
    assert not back.other and _bytes(back) == _bytes(job.meta)
    write_timeline_parquet(job, tmp_path / "job.parquet")
    stored = read_timeline_parquet(tmp_path / "job.parquet")
    assert not stored.meta.other and stored.meta.extra["ranks"] == job.meta.extra["ranks"]


def _stored(extra: dict[str, Any]) -> dict[str, Any]:
    return {"format": "kineto", "source": "x.json", "extra": extra, "schema_version": 3}


def test_a_key_tracer_does_not_know_is_kept_in_its_place() -> None:
    extra = {"base_time_ns": 5, "from_another_tool": {"a": [1, 2]}, "skipped": {"ts missing": 1}, "z": None}
    meta = TraceMeta.from_dict(_stored(extra))
    assert dict(meta.extra) == {"base_time_ns": 5, "skipped": {"ts missing": 1}}
    assert meta.other == {"from_another_tool": {"a": [1, 2]}, "z": None}
    assert list(meta.to_dict()["extra"].items()) == list(extra.items())
    # keys set since come after, as in a dict
    meta.extra["notes"] = ["n"]
    assert list(meta.to_dict()["extra"]) == ["base_time_ns", "from_another_tool", "skipped", "z", "notes"]


def test_a_value_of_another_type_is_not_typed_but_kept() -> None:
    extra = {"ranks": {"0": "rank0.json"}, "skipped": {"ts missing": "1"}, "clock_fix_ns": {"1": 5}}
    meta = TraceMeta.from_dict(_stored(extra))
    assert meta.extra.get("ranks") is None and meta.extra.get("skipped") is None  # (typed reads never see them)
    assert meta.extra["clock_fix_ns"] == {"1": 5}
    assert meta.other == {"ranks": {"0": "rank0.json"}, "skipped": {"ts missing": "1"}}
    assert orjson.dumps(meta.to_dict()["extra"]) == orjson.dumps(extra)
    # a value of its type set in its place replaces it there
    meta.add_extra({"skipped": {"ts missing": 1}})
    assert list(meta.to_dict()["extra"]) == ["ranks", "skipped", "clock_fix_ns"] and "skipped" not in meta.other
    # and one set directly wins over the one kept
    meta.extra["ranks"] = {"0": {"source": "rank0.json", "rank_from": "order"}}
    assert meta.to_dict()["extra"]["ranks"] == {"0": {"source": "rank0.json", "rank_from": "order"}}


def test_fits_extra() -> None:
    assert fits_extra("skipped", None) and fits_extra("skipped", {"a": 1}) and not fits_extra("skipped", {"a": True})
    assert fits_extra("distributed_info", "anything the trace held") and not fits_extra("no such key", 1)
    assert not fits_extra("cuda_sync", {"correlation": [1]})  # (a table lacking columns)


def test_unknown_keys_survive_a_parquet_file_and_an_nsys_export(tmp_path: Path) -> None:
    meta = TraceMeta.from_dict(_stored({"base_time_ns": 7, "theirs": [1, "a"]}))
    t = Timeline(load_trace(DATA / "pair_kineto.json.gz", cache=False).events, meta)
    write_timeline_parquet(t, tmp_path / "t.parquet", extra_meta={"exported_by": "tracer test", "also": 1})
    back = read_timeline_parquet(tmp_path / "t.parquet").meta
    # the footer's own top-level keys join extra after the stored ones, as before extra was typed
    assert list(back.extra_dict()) == ["base_time_ns", "theirs", "stored_as", "clock", "clock_offset_ns",
                                       "exported_by", "also"]
    assert back.other == {"theirs": [1, "a"], "also": 1} and back.extra["exported_by"] == "tracer test"
    out = export_timeline(t, tmp_path / "t.sqlite", "nsys-sqlite").path
    with sqlite3.connect(out) as con:
        (saved,) = con.execute("SELECT value FROM TRACER_META WHERE name = 'timeline_meta'").fetchone()
    assert orjson.loads(saved)["extra"] == {"base_time_ns": 7, "theirs": [1, "a"]}
    imported = load_trace(Path(out), cache=False).meta
    assert imported.extra["exported_from"] == "kineto" and imported.other == {"theirs": [1, "a"]}
    assert list(imported.extra_dict())[:3] == ["exported_from", "base_time_ns", "theirs"]


def test_a_meta_without_extra_loads() -> None:
    meta = TraceMeta.from_dict({"format": "parquet"})
    assert meta.extra == {} and meta.other == {} and meta.to_dict()["extra"] == {}
    with pytest.raises(TypeError):  # (not an object: nsys' TRACER_META reader calls it damaged)
        TraceMeta.from_dict({"format": "kineto", "extra": 5})
    assert Timeline(empty_events(), TraceMeta(format="x")).meta.extra_dict() == {}
