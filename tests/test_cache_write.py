"""The Parquet cache is never worth failing a load: a cache that cannot be written is skipped, whatever the reason
(docs/design.md, "Parquet cache")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import cli_main
from tracer import parsers
from tracer.errors import UsageError
from tracer.parsers import cache_path, load_trace


def _big_trace(path: Path, n_kernels: int, **top: object) -> Path:
    """A Kineto trace over the cache's 4 MB threshold (padded with JSON white space)."""
    events = [
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10 * i, "dur": 5,
         "args": {"device": 0, "stream": 7, "correlation": i}}
        for i in range(1, n_kernels + 1)
    ]
    body = json.dumps({"schemaVersion": 1, **top, "traceEvents": events}).encode()  # (json: ints beyond 64 bits)
    path.write_bytes(body[:-1] + b" " * (parsers.CACHE_MIN_BYTES + 1 - len(body)) + b"}")
    return path


@pytest.mark.parametrize(
    "error",
    [
        UsageError("here", "cannot write here: Read-only file system"),  # the atomic writer, read-only place
        OSError(30, "Read-only file system"),
        TypeError("Integer exceeds 64-bit range"),  # orjson, on metadata it cannot store
        ValueError("ArrowInvalid: something pyarrow refuses"),
    ],
    ids=["usage-error", "os-error", "type-error", "value-error"],
)
def test_a_cache_write_that_fails_skips_the_cache_not_the_load(tmp_path: Path, monkeypatch, error) -> None:
    """The issue's case (UsageError from the atomic writer) was fixed before issue 12 (tests/test_values.py has
    its regression test); any other failure of the write still failed the load with "unexpected content"."""
    p = _big_trace(tmp_path / "t.json", 3)

    def refuse(*args: object, **kwargs: object) -> None:
        raise error

    monkeypatch.setattr("tracer.files.storage.write_timeline_parquet", refuse)
    written: list[Path] = []
    assert len(load_trace(p, on_cache_write=written.append).events) == 3
    assert written == [] and not cache_path(p).exists()


@pytest.mark.slow
def test_a_trace_whose_metadata_the_cache_cannot_store_is_read_and_summarised(tmp_path: Path) -> None:
    """Regression: a ≥ 4 MB Kineto trace whose distributedInfo holds an integer beyond 64 bits read fine with
    --no-cache, but its cache write (orjson refuses such integers) failed the whole load: "could not be read:
    unexpected content (TypeError: Integer exceeds 64-bit range)", exit 2."""
    p = _big_trace(tmp_path / "t.json", 3, distributedInfo={"rank": 0, "world_size": 1, "pg_count": 2**70})
    assert len(load_trace(p, cache=False).events) == 3
    assert len(load_trace(p).events) == 3
    assert not cache_path(p).exists()
    assert [q.name for q in tmp_path.iterdir()] == ["t.json"], "a temporary file was left"
    proc = cli_main("summary", "--json", str(p))
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert json.loads(proc.stdout)["devices"]["0"]["kernels"] == 3
