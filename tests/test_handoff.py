"""tracer.job.handoff: a scanned part written to a file by one worker and read back, mapped, by another; and a job
whose ranks are split leaves no file behind and falls back to the caller where the file cannot be written."""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from dask.callbacks import Callback

from tracer.job import handoff, rank_tasks, scan, scheduling, task_graph
from tracer.parsers import kineto_scan, load_trace
from tracer.parsers.kineto import load_kineto_parts

DATA = Path(__file__).parent / "data"
TRACE = DATA / "mlp_train_200.json.gz"


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("plain") / "rank-0.json"
    path.write_bytes(gzip.decompress(TRACE.read_bytes()))
    return path


def test_a_part_comes_back_as_it_went(plain: Path, tmp_path: Path) -> None:
    part = kineto_scan.scan_kineto_part(plain.read_bytes(), 1, 2)
    assert part is not None and part.columns
    out = str(tmp_path / "part")
    handoff.save(part, out)
    back = handoff.load(out)
    assert not os.path.exists(out)  # (taken: the file goes, the mapping stays while the arrays use it)
    assert back.columns.keys() == part.columns.keys()
    for k, v in part.columns.items():
        assert back.columns[k].dtype == v.dtype and np.array_equal(back.columns[k], v), k
        back.columns[k][:1] = 0  # (a private mapping: writable, and the file is not changed by it)
    assert (back.names, back.pgs, back.syncs, back.slice_ends) == (part.names, part.pgs, part.syncs, part.slice_ends)
    assert (back.process_names, back.thread_names, back.skipped, back.tail) == \
        (part.process_names, part.thread_names, part.skipped, part.tail)


def test_save_refuses_a_file_that_exists_and_leaves_nothing_when_it_fails(tmp_path: Path) -> None:
    out = tmp_path / "part"
    out.write_bytes(b"someone's")
    with pytest.raises(FileExistsError):
        handoff.save({"a": np.arange(3)}, str(out))
    assert out.read_bytes() == b"someone's"
    with pytest.raises(Exception):  # noqa: B017,PT011 - whatever pickle raises for a lambda
        handoff.save({"a": np.arange(3), "f": lambda: 0}, str(tmp_path / "half"))
    assert not (tmp_path / "half").exists()


def test_load_refuses_a_file_it_did_not_write(tmp_path: Path) -> None:
    out = tmp_path / "part"
    out.write_bytes(b"not a handoff file at all, long enough to be mapped")
    with pytest.raises(ValueError, match="not a handoff file"):
        handoff.load(str(out))
    assert not out.exists()


def test_the_folder_is_in_memory_where_there_is_room(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(handoff, "SHM", str(tmp_path / "shm"))  # (none: the system's temporary folder)
    folder = handoff.new_folder()
    assert folder is not None
    try:
        assert Path(folder).parent != tmp_path / "shm" and os.stat(folder).st_mode & 0o777 == 0o700
        assert Path(folder).name.startswith(f"tracer-parts-{os.getpid()}-")
    finally:
        os.rmdir(folder)
    (tmp_path / "shm").mkdir()
    folder = handoff.new_folder(1 << 20)
    assert folder is not None and Path(folder).parent == tmp_path / "shm"
    os.rmdir(folder)
    free = os.statvfs(tmp_path).f_bavail * os.statvfs(tmp_path).f_frsize
    folder = handoff.new_folder(free)  # (not twice the room it needs: a small /dev/shm is left alone)
    assert folder is not None and Path(folder).parent != tmp_path / "shm"
    os.rmdir(folder)
    monkeypatch.setattr(os, "name", "nt")  # (a mapped file cannot be removed there: no handoff)
    assert handoff.new_folder() is None


def test_folders_whose_process_is_gone_are_removed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess
    import sys

    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True).stdout.strip()
    shm = tmp_path / "shm"
    shm.mkdir()
    monkeypatch.setattr(handoff, "SHM", str(shm))
    for name in (f"tracer-parts-{gone}-abc", f"tracer-parts-{os.getpid()}-def", "tracer-parts-x-ghi", "other"):
        (shm / name).mkdir()
        (shm / name / "rank0-part0").write_bytes(b"left by a killed job")
    folder = handoff.new_folder()
    assert folder is not None
    os.rmdir(folder)
    # the dead process's folder goes; this (live) process's, an unknown name's and anything else's stay
    assert sorted(p.name for p in shm.iterdir()) == sorted(
        [f"tracer-parts-{os.getpid()}-def", "tracer-parts-x-ghi", "other"])


def test_an_empty_job_is_no_tasks() -> None:
    assert task_graph.parse_groups([], scheduler=scheduling.Scheduler("processes")) == []


@pytest.mark.slow
def test_scan_part_hands_a_file_over_or_the_part_itself(plain: Path, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    import tracer.parsers.kineto

    whole = load_trace(plain, cache=False)
    left = [scan.scan_part(str(plain), j, 2, str(tmp_path / f"p{j}")) for j in range(2)]
    assert all(isinstance(s, scan.Handoff) for s, _ in left)
    with monkeypatch.context() as m:  # (the merge takes the parts: a whole-file parse instead would fail here)
        m.setattr(tracer.parsers.kineto, "load_trace", lambda *a, **k: pytest.fail("parsed whole, parts not used"))
        merged = rank_tasks.merge_group(0, [str(plain)], rank_tasks.Task(), left)
    pd.testing.assert_frame_equal(merged.timeline.events, whole.events, check_exact=True)
    assert not list(tmp_path.iterdir())  # (each file taken by the merge)
    # nowhere to write it: the part comes back itself
    kept = [scan.scan_part(str(plain), j, 2, str(tmp_path / "gone" / f"p{j}")) for j in range(2)]
    assert all(isinstance(s, kineto_scan.KinetoPart) for s, _ in kept)
    pd.testing.assert_frame_equal(load_kineto_parts(plain, [s for s, _ in kept]).events, whole.events,
                                  check_exact=True)
    # a file gone before its merge: the whole file is parsed instead, the same timeline
    lost = [(scan.Handoff(str(tmp_path / "never")), 0.0), kept[1]]
    pd.testing.assert_frame_equal(rank_tasks.merge_group(0, [str(plain)], rank_tasks.Task(), lost).timeline.events,
                                  whole.events, check_exact=True)


@pytest.mark.slow
def test_a_split_job_hands_its_parts_over_in_files_and_leaves_none(
        plain: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    files = [plain]
    second = tmp_path / "rank-1.json"
    second.write_bytes(plain.read_bytes())
    files.append(second)
    shm = tmp_path / "shm"
    shm.mkdir()
    monkeypatch.setattr(handoff, "SHM", str(shm))  # (read in this process, which makes the job's folder)
    monkeypatch.setattr(scan, "MIN_PART_BYTES", 1 << 20)
    monkeypatch.setattr(scheduling, "cores", lambda: 4)
    assert scan.split_counts([[str(p)] for p in files]) == [2, 2]
    came: list[object] = []  # (what each task gave back to this process: a dask callback sees it here)
    with Callback(posttask=lambda key, result, *rest: came.append(result)):
        done = task_graph.parse_groups([[p] for p in files], scheduler=scheduling.Scheduler("processes"),
                                     task=rank_tasks.Task(analyze=True))
    assert all(d.error is None and "parts" in d.phases for d in done)
    handed = [r[0] for r in came if isinstance(r, tuple)]
    assert len(handed) == 4 and all(isinstance(h, scan.Handoff) for h in handed)
    assert sorted(Path(h.path).name for h in handed) == ["rank0-part0", "rank0-part1", "rank1-part0", "rank1-part1"]
    assert {Path(h.path).parent.parent for h in handed} == {shm}
    assert not list(shm.iterdir())  # (the job's folder removed, its files taken)
