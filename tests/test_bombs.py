"""Decompression bombs: a .gz that inflates to gigabytes is refused early, in one line, with bounded memory."""

from __future__ import annotations

import gzip
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from tracer.errors import TraceFormatError
from tracer.parsers import iter_inflated, load_trace


def _bomb(path: Path, head: bytes, inflated_gb: float) -> Path:
    """A gzip file of concatenated members, each 256 MB of spaces after ``head`` (the first only)."""
    member_mb = 256
    one = gzip.compress(b" " * (member_mb << 20), compresslevel=9)
    members = max(1, int(inflated_gb * 1024 / member_mb))
    with open(path, "wb") as f:
        f.write(gzip.compress(head))
        for _ in range(members):
            f.write(one)
    return path


def _run_measured(*args: str) -> tuple[subprocess.CompletedProcess[str], int]:
    """Run tracer in a child; return it and the child's peak RSS in MB."""
    code = (
        # VmHWM (kB): this process's own peak. getrusage's ru_maxrss would start at the forking pytest's RSS.
        "import sys; from tracer.cli import main; rc = main(sys.argv[1:]); "
        "print([l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM:')][0], file=sys.stderr); "
        "sys.exit(rc)"
    )
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120)
    lines = proc.stderr.strip().splitlines()
    return proc, int(lines[-1]) // 1024


@pytest.mark.slow
@pytest.mark.parametrize(
    "name, head",
    [("bomb.json.gz", b'{"traceEvents": ['), ("bomb.sqlite.gz", b"SQLite format 3\x00" + b"\x00" * 84)],
)
def test_a_10_gb_bomb_is_refused_in_one_line_with_bounded_memory(tmp_path: Path, name: str, head: bytes) -> None:
    bomb = _bomb(tmp_path / name, head, inflated_gb=10)
    assert bomb.stat().st_size < 20 << 20  # ~10 MB on disk
    proc, peak_mb = _run_measured("summary", str(bomb))
    assert proc.returncode == 2
    message = proc.stderr.strip().splitlines()[:-1]
    assert len(message) == 1 and "decompression bomb" in message[0] and str(bomb) in message[0]
    # bounded: what summarising a tiny real trace costs (imports included: ~270 MB here), plus at most 100 MB
    _, baseline_mb = _run_measured("summary", "--json", str(Path(__file__).parent / "data" / "two_streams.json.gz"))
    assert peak_mb < baseline_mb + 100, (peak_mb, baseline_mb)
    assert not list(tmp_path.glob("*.parquet")) and not list(tmp_path.glob(".*"))


def test_real_traces_are_far_below_the_ratio(data_dir: Path) -> None:
    for gz in data_dir.glob("*.gz"):
        data = gz.read_bytes()
        assert b"".join(iter_inflated(gz, data)) == gzip.decompress(data)


@pytest.mark.slow
def test_the_ratio_can_be_raised_for_a_real_trace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # 80 MB of JSON whitespace around an empty trace: refused at the default ratio, read when allowed
    p = tmp_path / "sparse.json.gz"
    p.write_bytes(gzip.compress(b'{"traceEvents": [' + b" " * (80 << 20) + b"]}"))
    with pytest.raises(TraceFormatError, match="TRACER_GZIP_MAX_RATIO"):
        load_trace(p)
    monkeypatch.setenv("TRACER_GZIP_MAX_RATIO", "100000")
    try:
        load_trace(p)
    except TraceFormatError as exc:  # an empty trace may be refused for what it holds, not for its size
        assert "bomb" not in str(exc)


def test_multi_member_and_padded_gzip_still_read(tmp_path: Path) -> None:
    p = tmp_path / "two.gz"
    data = gzip.compress(b"abc") + gzip.compress(b"def") + b"\x00" * 16
    assert b"".join(iter_inflated(p, data)) == b"abcdef"
    with pytest.raises(TraceFormatError, match="trailing garbage"):
        list(iter_inflated(p, gzip.compress(b"abc") + b"junk"))
    with pytest.raises(TraceFormatError, match="truncated"):
        list(iter_inflated(p, gzip.compress(b"abc" * 1000)[:-12]))
    with pytest.raises(TraceFormatError, match="damaged"):
        list(iter_inflated(p, b"\x1f\x8b" + zlib.compress(b"x")))
