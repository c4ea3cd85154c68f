"""Atomic output (tracer/io.py): where it cannot write, one clear error and nothing left behind."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from tracer.errors import UsageError
from tracer.io import atomic_dir, atomic_path


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
