"""Faults while writing (issue 14): a full disk, two runs at once, Ctrl-C, impossible output paths. Each is one
line on stderr and a non-zero exit, never a traceback, and leaves no half-written output behind."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import DATA, cli_main
from tracer.cli import main
from tracer.files.atomic import publish_dir
from tracer.record import scenario as rec

TRACE = DATA / "two_streams.json.gz"
FORMATS = ("out.sqlite", "out.json", "out.json.gz", "out.nvtxt", "out.parquet")
SMALL = ["-p", "ops=2", "-p", "size=16", "-p", "depth=2"]
NO_SPACE = "No space left on device"


def _one_line(err: str) -> str:
    assert "Traceback" not in err, err
    lines = err.splitlines()
    assert len(lines) == 1, err
    return lines[0]


# ---- a full disk ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", FORMATS)
def test_a_full_disk_during_export_is_one_line_and_keeps_the_previous_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    # was a 42-53 line traceback, exit 1. The writer writes part of the file, then the disk is full.
    from tracer.exporters import get_exporter

    exporter = get_exporter(None, name)
    real = exporter.writer()

    def full(timeline, dest, *, final, progress=None):  # noqa: ANN001
        real(timeline, dest, final=final, progress=progress)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(type(exporter), "writer", lambda self: full)
    out = tmp_path / name
    out.write_bytes(b"previous")
    assert main(["export", str(TRACE), "-o", str(out), "--force"]) == 1
    assert _one_line(capsys.readouterr().err) == f"tracer: error: cannot write {out}: {NO_SPACE}"
    assert out.read_bytes() == b"previous"
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]  # no temporary left


@pytest.mark.slow
def test_a_full_disk_during_record_is_one_line_and_leaves_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import tracer.record.derive

    def full(*_args: object, **_kwargs: object) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(tracer.record.derive, "write_timeline_parquet", full)
    rc = main(["record", "independent-ops", "-d", "cpu", "-o", str(tmp_path), "-q", *SMALL])
    line = _one_line(capsys.readouterr().err)
    assert rc == 1
    assert line.startswith(f"tracer: error: cannot write {tmp_path}/independent-ops-cpu-threads-")
    assert line.endswith(f": {NO_SPACE}")
    assert list(tmp_path.iterdir()) == []


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    """A 96 KiB tmpfs: a real full disk. Needs root and a working mount(8) (a container may refuse it)."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root and mount(8)")
    where = tmp_path / "tiny"
    where.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=96k", "tmpfs", str(where)], capture_output=True,
                          text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
    yield where
    subprocess.run(["umount", str(where)], check=False)


@pytest.mark.slow
def test_a_real_full_disk_in_every_format_and_in_record(tiny_disk: Path) -> None:
    big = DATA / "mlp_train_200.json.gz"  # its exports are all larger than the disk
    for name in FORMATS:
        out = tiny_disk / name
        out.write_bytes(b"previous")
        proc = cli_main("export", str(big), "-o", str(out), "--force")
        assert proc.returncode == 1, proc.stderr
        assert _one_line(proc.stderr) == f"tracer: error: cannot write {out}: {NO_SPACE}"
        assert out.read_bytes() == b"previous"
        assert sorted(p.name for p in tiny_disk.iterdir()) == [name]
        out.unlink()
    filler = tiny_disk / "filler"  # leave 16 KiB: too little for a run's trace, parquet and meta
    st = os.statvfs(tiny_disk)
    filler.write_bytes(b"\0" * (st.f_bavail * st.f_frsize - 16 * 1024))
    proc = subprocess.run(
        [sys.executable, "-m", "tracer", "record", "independent-ops", "-d", "cpu", "-o", str(tiny_disk), "-q",
         "-p", "ops=8", "-p", "size=64", "-p", "depth=20"],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 1, proc.stderr
    assert _one_line(proc.stderr).endswith(f": {NO_SPACE}")
    assert list(tiny_disk.iterdir()) == [filler]


# ---- two runs at once -------------------------------------------------------------------------------------------


def test_publishing_one_name_from_many_threads_gives_each_its_own(tmp_path: Path) -> None:
    # the old rename onto a name chosen before the run failed with ENOTEMPTY and lost the finished run
    temps = []
    for i in range(8):
        t = tmp_path / f".tmp{i}"
        t.mkdir()
        (t / "meta.json").write_text(str(i))
        temps.append(t)
    got: list[Path] = []
    barrier = threading.Barrier(len(temps))

    def publish(t: Path) -> None:
        barrier.wait()
        got.append(publish_dir(t, tmp_path / "run"))

    threads = [threading.Thread(target=publish, args=(t,)) for t in temps]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert sorted(p.name for p in got) == sorted(["run"] + [f"run-{i}" for i in range(2, 9)])
    assert sorted((p / "meta.json").read_text() for p in got) == [str(i) for i in range(8)]


def test_an_existing_empty_directory_of_that_name_is_not_replaced(tmp_path: Path) -> None:
    (tmp_path / "run").mkdir()  # someone else's (or a reservation): a bare rename would have replaced it
    t = tmp_path / ".tmp"
    t.mkdir()
    assert publish_dir(t, tmp_path / "run") == tmp_path / "run-2"


@pytest.mark.slow
def test_two_records_at_once_into_one_out_both_land(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "tracer", "record", "independent-ops", "-d", "cpu", "-o", str(tmp_path), "-q",
           *SMALL]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = [p.communicate(timeout=300) + (p.returncode,) for p in procs]
    assert [rc for _, _, rc in results] == [0, 0], results
    paths = {Path(out.strip()) for out, _, _ in results}
    assert len(paths) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in paths)
    for p in paths:
        assert (p / "meta.json").is_file() and (p / "timeline.parquet").is_file()


# ---- Ctrl-C -----------------------------------------------------------------------------------------------------


def test_ctrl_c_during_record_says_interrupted_and_leaves_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Typer turned KeyboardInterrupt into a silent Exit(130): exit 130, no message
    def interrupt(*_args: object, **_kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(rec, "_run_torch", interrupt)
    assert main(["record", "independent-ops", "-d", "cpu", "-o", str(tmp_path), *SMALL]) == 130
    assert capsys.readouterr().err == "tracer: interrupted\n"
    assert list(tmp_path.iterdir()) == []


def test_ctrl_c_in_any_command_says_interrupted(capsys: pytest.CaptureFixture[str],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    import tracer.parsers

    def interrupt(*_args: object, **_kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(tracer.parsers, "load_trace", interrupt)
    assert main(["summary", str(TRACE)]) == 130
    assert capsys.readouterr().err == "tracer: interrupted\n"


# ---- impossible output paths and inputs -------------------------------------------------------------------------


def test_export_under_a_file_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "afile").write_text("")
    assert main(["export", str(TRACE), "-o", str(tmp_path / "afile" / "out.json")]) == 2
    assert _one_line(capsys.readouterr().err) == f"tracer: error: {tmp_path / 'afile'}: is a file, not a directory"


@pytest.mark.parametrize("name", FORMATS)
def test_an_output_name_too_long_for_the_file_system_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    out = tmp_path / ("x" * 300 + name)
    rc = main(["export", str(TRACE), "-o", str(out)])
    line = _one_line(capsys.readouterr().err)
    assert rc in (1, 2)
    assert line.startswith("tracer: error: ") and "File name too long" in line
    assert list(tmp_path.iterdir()) == []


def test_record_into_a_too_long_out_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["record", "independent-ops", "-d", "cpu", "-o", str(tmp_path / ("x" * 300)), *SMALL]) == 2
    assert "File name too long" in _one_line(capsys.readouterr().err)


def test_export_of_a_run_directory_without_a_trace_is_one_line(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "meta.json").write_text("{}")
    assert main(["export", str(run), "-o", str(tmp_path / "out.json")]) == 2
    assert _one_line(capsys.readouterr().err).startswith(f"tracer: error: {run}")
    assert not (tmp_path / "out.json").exists()
