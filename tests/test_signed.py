"""Pickles signed with the user's own key (tracer/files/signed.py): read back only where this user's tracer wrote
them for the same context; anything else reads as absent and is never unpickled."""

from __future__ import annotations

import os
import pickle
import stat
from pathlib import Path

import pytest

from tracer.files import signed


@pytest.fixture()
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _key_path() -> Path:
    path = signed.key_path()
    assert path is not None
    return path


class _Boom:
    """Unpickling this runs code: what a crafted file would do."""

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, ("touch pwned",))


def test_a_signed_pickle_reads_back_and_the_key_is_the_users_alone(home: Path, tmp_path: Path) -> None:
    blob = signed.dumps({"a": [1, 2.5, "x"]}, "ctx")
    assert blob is not None and blob.startswith(signed.MAGIC)
    key = _key_path()
    assert key == home / "tracer" / "signing" / "results.key" and len(key.read_bytes()) == 32
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    f = tmp_path / "r.pickle"
    f.write_bytes(blob)
    assert signed.load(f, "ctx") == {"a": [1, 2.5, "x"]}
    first = key.read_bytes()
    assert signed.dumps({"a": 1}, "ctx") is not None and key.read_bytes() == first  # (one key, kept)


def test_what_was_not_signed_here_for_this_context_is_never_unpickled(home: Path, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    f = tmp_path / "r.pickle"
    blob = signed.dumps([1, 2, 3], "ctx")
    assert blob is not None
    f.write_bytes(blob)
    assert signed.load(f, "other context") is None
    f.write_bytes(blob[:-1] + bytes([blob[-1] ^ 1]))  # one bit of the payload changed
    assert signed.load(f, "ctx") is None
    payload = pickle.dumps(_Boom())
    f.write_bytes(blob[: len(signed.MAGIC) + 32] + payload)  # a crafted payload under a copied signature
    assert signed.load(f, "ctx") is None
    f.write_bytes(signed.MAGIC + b"\0" * 32 + payload)
    assert signed.load(f, "ctx") is None
    for junk in (b"", b"garbage", signed.MAGIC, payload):
        f.write_bytes(junk)
        assert signed.load(f, "ctx") is None
    assert not (tmp_path / "pwned").exists()
    # signed by another user's key (their home): not ours
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "theirs"))
    theirs = signed.dumps([1, 2, 3], "ctx")
    monkeypatch.setenv("XDG_CACHE_HOME", str(home))
    assert theirs is not None and theirs != blob
    f.write_bytes(theirs)
    assert signed.load(f, "ctx") is None
    assert signed.load(tmp_path / "absent", "ctx") is None


def test_no_key_no_cache_and_reading_makes_none(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    f = tmp_path / "r.pickle"
    f.write_bytes(b"whatever")
    assert signed.load(f, "ctx") is None and not _key_path().exists()  # (a read makes no key)
    blocked = tmp_path / "file"
    blocked.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))  # (a cache folder that cannot be made)
    assert signed.dumps([1], "ctx") is None


def test_a_key_that_is_not_the_users_alone_signs_nothing(home: Path, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A key someone else could have written or read (readable by others, a link) is not used: with a key they
    know, a crafted pickle would pass the check (the review ran code that way)."""
    monkeypatch.chdir(tmp_path)
    key = _key_path()
    key.parent.mkdir(parents=True)
    key.write_bytes(b"A" * 32)
    key.chmod(0o644)
    payload = pickle.dumps(_Boom())
    import hashlib
    import hmac

    forged = signed.MAGIC + hmac.new(b"A" * 32, b"ctx\0" + payload, hashlib.sha256).digest() + payload
    f = tmp_path / "r.pickle"
    f.write_bytes(forged)
    assert signed.load(f, "ctx") is None and signed.dumps([1], "ctx") is None
    key.unlink()
    planted = tmp_path / "planted.key"
    planted.write_bytes(b"A" * 32)
    planted.chmod(0o600)
    key.symlink_to(planted)
    assert signed.load(f, "ctx") is None and signed.dumps([1], "ctx") is None
    assert not (tmp_path / "pwned").exists()


def test_a_link_a_pipe_or_a_device_in_place_of_the_file_reads_as_absent(home: Path, tmp_path: Path) -> None:
    """A dataset from elsewhere may hold anything under the results' name: /dev/zero behind a link read until
    memory ran out (a traceback), a pipe blocked for ever."""
    assert signed.dumps([1], "ctx") is not None  # (a key, so the reads get as far as the file)
    link = tmp_path / "zero.pickle"
    link.symlink_to("/dev/zero")
    assert signed.load(link, "ctx") is None
    fifo = tmp_path / "fifo.pickle"
    os.mkfifo(fifo)
    assert signed.load(fifo, "ctx") is None


def test_no_key_where_no_absolute_home_is_known(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A relative XDG_CACHE_HOME is ignored (the XDG spec), and with no absolute home there is no key: else it was
    made in whatever folder tracer ran in (a repository, where it could be committed)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", "cache")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert signed.key_path() == tmp_path / "home" / ".cache" / "tracer" / "signing" / "results.key"
    monkeypatch.setenv("HOME", "relative-home")
    assert signed.key_path() is None and signed.dumps([1], "ctx") is None
    assert not (tmp_path / "cache").exists() and not (tmp_path / "relative-home").exists()


def test_a_key_folder_others_can_write_to_signs_and_checks_nothing(home: Path, tmp_path: Path) -> None:
    blob = signed.dumps([1], "ctx")
    assert blob is not None
    f = tmp_path / "r.pickle"
    f.write_bytes(blob)
    assert signed.load(f, "ctx") == [1]
    _key_path().parent.chmod(0o777)
    assert signed.load(f, "ctx") is None and signed.dumps([1], "ctx") is None


def test_a_file_past_the_size_bound_is_not_read(home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blob = signed.dumps(list(range(1000)), "ctx")
    assert blob is not None
    f = tmp_path / "r.pickle"
    f.write_bytes(blob)
    assert signed.load(f, "ctx") == list(range(1000))
    monkeypatch.setattr(signed, "MAX_BYTES", len(blob) - 1)
    assert signed.load(f, "ctx") is None


def test_a_group_writable_cache_folder_above_the_key_s_own_is_fine(home: Path, tmp_path: Path) -> None:
    """Under umask 002 (user private groups) tracer's cache folder is 0775 (the SQL prompt's history makes it): only
    the key's own folder must be closed to others, and someone who can write above it can swap that folder only
    for one of their own, which is refused."""
    (home / "tracer").mkdir(parents=True)
    (home / "tracer").chmod(0o775)
    blob = signed.dumps([1], "ctx")
    assert blob is not None
    f = tmp_path / "r.pickle"
    f.write_bytes(blob)
    assert signed.load(f, "ctx") == [1]
