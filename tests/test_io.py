"""Atomic output (tracer/files/atomic.py): where it cannot write, one clear error and nothing left behind."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from tracer.errors import UsageError
from tracer.files.atomic import atomic_dir, atomic_path


def test_a_file_in_the_way_of_the_directory_is_a_usage_error(tmp_path: Path) -> None:
    # mkdir's FileExistsError / NotADirectoryError used to escape as a traceback
    (tmp_path / "afile").write_text("")
    for dest in (tmp_path / "afile" / "t.sqlite", tmp_path / "afile" / "sub" / "t.sqlite"):
        with pytest.raises(UsageError, match=r"afile: is a file, not a directory$"), atomic_path(dest):
            pytest.fail("the block must not run")
    with pytest.raises(UsageError, match=r"afile: is a file, not a directory$"), atomic_dir(tmp_path / "afile" / "run"):
        pytest.fail("the block must not run")


@pytest.mark.parametrize("make", [atomic_path, atomic_dir])
def test_an_unwritable_directory_is_a_usage_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, make) -> None:
    def refuse(*_args, **_kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(tempfile, "mkstemp", refuse)
    monkeypatch.setattr(tempfile, "mkdtemp", refuse)
    with pytest.raises(UsageError, match=rf"^{tmp_path}: cannot write here: Permission denied$"), make(tmp_path / "out"):
        pytest.fail("the block must not run")
    assert list(tmp_path.iterdir()) == []


def test_a_device_or_a_pipe_is_refused_and_stays_what_it_is(tmp_path: Path) -> None:
    # `tracer export ... -o /dev/full --force` renamed a regular file over the device: /dev/full became a file
    import os
    import stat

    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    for dest in (fifo, Path(os.devnull)):
        with pytest.raises(UsageError, match=r"is not a regular file"), atomic_path(dest):
            pytest.fail("the block must not run")
    assert stat.S_ISFIFO(fifo.lstat().st_mode) and stat.S_ISCHR(Path(os.devnull).stat().st_mode)
    assert [p.name for p in tmp_path.iterdir()] == ["pipe.json"]  # no temporary left


def test_a_symlink_stays_a_link_and_its_file_is_replaced(tmp_path: Path) -> None:
    target = tmp_path / "real.json"
    target.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(target.name)
    with atomic_path(link) as tmp:
        tmp.write_text("new")
    assert link.is_symlink() and target.read_text() == "new"
    dangling = tmp_path / "to-nothing.json"
    dangling.symlink_to("made.json")
    with atomic_path(dangling) as tmp:
        tmp.write_text("made")
    assert dangling.is_symlink() and (tmp_path / "made.json").read_text() == "made"


def test_a_published_directory_gets_the_usual_modes(tmp_path: Path) -> None:
    # made private (mkdtemp 0700, mkstemp 0600), a run stayed so: `tracer record ddp` left drwx------ runs
    import os
    import stat

    from tracer.files.atomic import publish_dir, temp_dir_beside

    tmp = temp_dir_beside(tmp_path / "run")
    (tmp / "traces").mkdir(mode=0o700)
    fd, name = tempfile.mkstemp(dir=tmp / "traces")
    os.close(fd)
    (tmp / "link").symlink_to("/")  # (left alone: not ours)
    old = os.umask(0o022)
    try:
        run = publish_dir(tmp, tmp_path / "run")
    finally:
        os.umask(old)
    assert run == tmp_path / "run"
    assert stat.S_IMODE(run.stat().st_mode) == stat.S_IMODE((run / "traces").stat().st_mode) == 0o755
    assert stat.S_IMODE((run / "traces" / Path(name).name).stat().st_mode) == 0o644


def test_opening_a_run_follows_no_link_and_keeps_going(tmp_path: Path) -> None:
    import os
    import stat

    from tracer.files.atomic import publish_dir, temp_dir_beside

    theirs = tmp_path / "theirs.txt"
    theirs.write_text("x")
    theirs.chmod(0o600)
    tmp = temp_dir_beside(tmp_path / "run")
    (tmp / "a_link").symlink_to(theirs)  # (a file elsewhere: never chmodded through the link)
    (tmp / "tool").write_text("#!/bin/sh\n")
    (tmp / "tool").chmod(0o700)
    unreadable = tmp / "unreadable"
    unreadable.write_text("x")
    unreadable.chmod(0o000)  # (cannot be opened by a non-root user: left as it is, publishing goes on)
    old = os.umask(0o022)
    try:
        run = publish_dir(tmp, tmp_path / "run")
    finally:
        os.umask(old)
    assert stat.S_IMODE(theirs.stat().st_mode) == 0o600
    assert stat.S_IMODE((run / "tool").stat().st_mode) == 0o755  # (an executable keeps its x bits)
    assert stat.S_IMODE(run.stat().st_mode) == 0o755
