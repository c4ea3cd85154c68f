"""A large plain Kineto trace scanned on several processes forked for its parse (tracer.parsers.kineto_fork):
exactly the timeline of one process's parse (frame, categories, meta), the whole file parsed here where a part
or a child fails, and one process where forking is not safe or not worth it."""

from __future__ import annotations

import gzip
import os
import threading
from pathlib import Path
from typing import Any, cast

import pandas as pd
import pytest

from tracer.parsers import kineto_fork, kineto_scan, load_trace
from tracer.timeline import Timeline

DATA = Path(__file__).parent / "data"
_MAY_FORK = kineto_fork._may_fork
#: traces of several hundred KB and more: a real one, a job's rank with collectives, ROCm's, one with CUDA graphs
TRACES = [DATA / name for name in ("mlp_train_200.json.gz", "external/HTA_nccl_parser_config_nccl_data.json.gz",
                                   "external/TraceLens_mi300_resnet_act_checkpoint.json.gz", "graphs_kineto.json.gz",
                                   "external/kineto_resnet50_num_workers_0_worker0.pt.trace.json.gz")]


@pytest.fixture(autouse=True)
def _small_parts(monkeypatch: pytest.MonkeyPatch) -> None:
    # parts of a few KB (in chunks of ~100 events), so that the test traces are split as a GB trace is
    monkeypatch.setattr(kineto_scan, "_CHUNK_BYTES", 32 * 1024)
    monkeypatch.setattr(kineto_fork, "PART_MIN_BYTES", 16 * 1024)
    monkeypatch.setattr(kineto_fork, "_cores", lambda: 4)
    monkeypatch.setattr(kineto_fork, "_may_fork", lambda: True)  # (whatever threads the test runner has)
    monkeypatch.delenv(kineto_fork.PROCESSES_ENV, raising=False)


def _plain(src: Path, tmp_path: Path) -> Path:
    raw = src.read_bytes()
    path = tmp_path / "trace.json"
    path.write_bytes(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    return path


def _assert_same(a: Timeline, b: Timeline) -> None:
    pd.testing.assert_frame_equal(a.events, b.events, check_exact=True)
    for column in a.events.select_dtypes("category"):
        assert list(a.events[column].cat.categories) == list(b.events[column].cat.categories), column
    assert a.meta == b.meta
    assert a.meta.extra == b.meta.extra


def _one_process(path: Path, monkeypatch: pytest.MonkeyPatch) -> Timeline:
    with monkeypatch.context() as m:
        m.setenv(kineto_fork.PROCESSES_ENV, "1")
        return load_trace(path, cache=False)


@pytest.mark.parametrize("src", TRACES, ids=lambda p: p.name)
def test_forked_parse_is_the_one_process_parse(src: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _plain(src, tmp_path)
    if path.stat().st_size < 2 * kineto_fork.PART_MIN_BYTES:
        pytest.skip("too small to be split")
    calls: list[int] = []
    forked = kineto_fork.scan_forked

    def counted(data: Any, n: int) -> Any:
        calls.append(n)
        return forked(data, n)

    monkeypatch.setattr(kineto_fork, "scan_forked", counted)
    _assert_same(load_trace(path, cache=False), _one_process(path, monkeypatch))
    assert calls and calls[0] > 1  # (it was split)


def test_a_failed_child_means_the_whole_file_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _plain(DATA / "mlp_train_200.json.gz", tmp_path)
    whole = _one_process(path, monkeypatch)
    scan = kineto_scan.scan_kineto_part

    def failing(data: Any, part: int, parts: int) -> Any:
        if part == parts - 1:
            raise MemoryError  # (in the child)
        return scan(data, part, parts)

    monkeypatch.setattr(kineto_fork, "scan_kineto_part", failing)
    _assert_same(load_trace(path, cache=False), whole)


def test_parts_come_back_as_scanned(tmp_path: Path) -> None:
    import mmap

    path = _plain(DATA / "mlp_train_200.json.gz", tmp_path)
    with open(path, "rb") as f:
        data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    try:
        got = kineto_fork.scan_forked(data, 3)
        want = [kineto_scan.scan_kineto_part(cast(bytes, data), j, 3) for j in range(3)]
        assert len(got) == 3
        for a, b in zip(got, want):
            assert a is not None and b is not None
            assert a.columns.keys() == b.columns.keys()
            for k in a.columns:
                assert (a.columns[k] == b.columns[k]).all(), k
            assert (a.names, a.pgs, a.skipped, a.head, a.tail) == (b.names, b.pgs, b.skipped, b.head, b.tail)
        del got, want
    finally:
        data.close()


def test_a_fork_that_fails_means_the_whole_file_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _plain(DATA / "mlp_train_200.json.gz", tmp_path)
    whole = _one_process(path, monkeypatch)

    def no_fork() -> int:
        raise BlockingIOError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(os, "fork", no_fork)
    _assert_same(load_trace(path, cache=False), whole)


def test_one_process_where_forking_is_not_worth_it_or_not_safe(monkeypatch: pytest.MonkeyPatch) -> None:
    big = 64 * kineto_fork.PART_MIN_BYTES
    assert kineto_fork.processes_for(big) == 4  # (the cores)
    assert kineto_fork.processes_for(kineto_fork.PART_MIN_BYTES) == 1  # (one part's worth)
    monkeypatch.setenv(kineto_fork.PROCESSES_ENV, "1")
    assert kineto_fork.processes_for(big) == 1
    monkeypatch.setenv(kineto_fork.PROCESSES_ENV, "2")
    assert kineto_fork.processes_for(big) == 2
    monkeypatch.setenv(kineto_fork.PROCESSES_ENV, "many")  # (not a number: the default)
    assert kineto_fork.processes_for(big) == 4
    monkeypatch.setattr(kineto_fork, "_may_fork", _MAY_FORK)  # (the real one)
    assert kineto_fork.processes_for(big) == (4 if _MAY_FORK() else 1)
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        assert not kineto_fork._may_fork()  # (another thread: a fork would copy its locks mid-use)
        assert kineto_fork.processes_for(big) == 1
    finally:
        stop.set()
        other.join()
