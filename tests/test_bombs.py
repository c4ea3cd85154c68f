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


def _run_measured(*args: str, prefix: str = "") -> tuple[subprocess.CompletedProcess[str], int]:
    """Run tracer in a child (after the Python statements ``prefix``); return it and the child's peak RSS in MB."""
    code = prefix + (
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


# ----- issue 38.2: a bomb below the ratio cap (JSON events at ~100×) is bounded by the memory budget instead

_EVENT = (b'{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": %d, "dur": 1, '
          b'"args": {"device": 0, "stream": 7}},' + b" " * 400)


def low_ratio_bomb(path: Path, inflated_mb: int) -> Path:
    """A Kineto trace of real-looking events padded to compress ~100× (half the ratio cap): one gzip member of
    8 MB of events, repeated, between a head and a tail member."""
    chunk: list[bytes] = []
    size = 0
    while size < 8e6:
        chunk.append(_EVENT % len(chunk))
        size += len(chunk[-1])
    middle = gzip.compress(b"".join(chunk), compresslevel=6, mtime=0)
    with open(path, "wb") as f:
        f.write(gzip.compress(b'{"traceEvents": [', mtime=0))
        for _ in range(max(1, inflated_mb // 8)):
            f.write(middle)
        f.write(gzip.compress(b'{"ph": "X", "name": "k", "pid": 0, "tid": 7, "ts": 0, "dur": 1}]}', mtime=0))
    return path


def test_a_bomb_below_the_ratio_cap_is_refused_past_the_memory_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from tracer.cli import main

    bomb = low_ratio_bomb(tmp_path / "events.json.gz", inflated_mb=8)
    inflated = sum(len(b) for b in iter_inflated(bomb, bomb.read_bytes()))
    assert 80 < inflated / bomb.stat().st_size < 200  # under the ratio cap: that check alone lets it through
    monkeypatch.setenv("TRACER_MAX_INFLATED_MB", "4")
    assert main(["summary", "--no-cache", str(bomb)]) == 2
    assert capsys.readouterr().err == (
        f"tracer: error: {bomb}: refused: the gzip stream inflates to more than 4 MB, the memory budget of one "
        "trace (TRACER_MAX_INFLATED_MB=4) — a decompression bomb, or set it higher if the trace is real\n")
    monkeypatch.setenv("TRACER_MAX_INFLATED_MB", "10")  # a real trace that size: raise the budget, it reads
    assert len(load_trace(bomb, cache=False).events) == 15_377 + 1


def test_the_memory_budget_is_a_quarter_of_what_is_available(monkeypatch: pytest.MonkeyPatch) -> None:
    from tracer.files import memory

    monkeypatch.delenv("TRACER_MAX_INFLATED_MB", raising=False)
    monkeypatch.setattr(memory, "available_bytes", lambda: 8_000_000_000)
    budget = memory.inflate_budget()
    assert budget is not None and budget.bytes == 2_000_000_000
    assert budget.why == "a quarter of the 8,000 MB of memory available now; TRACER_MAX_INFLATED_MB sets it"
    monkeypatch.setenv("TRACER_MAX_INFLATED_MB", "0")
    assert memory.inflate_budget() is None
    monkeypatch.setenv("TRACER_MAX_INFLATED_MB", "many")  # not a number: the default
    assert memory.inflate_budget() == budget
    real = memory.available_bytes()
    assert real is not None and real > 0


@pytest.mark.slow
def test_alow_ratio_bomb_is_refused_with_bounded_memory(tmp_path: Path) -> None:
    # 200 MB of events from 1.8 MB at ~110×, against a 64 MB budget: refused having held about the budget
    bomb = low_ratio_bomb(tmp_path / "events.json.gz", inflated_mb=200)
    env_code = "import os; os.environ['TRACER_MAX_INFLATED_MB'] = '64'; "
    proc, peak_mb = _run_measured("summary", "--no-cache", str(bomb), prefix=env_code)
    assert proc.returncode == 2 and "memory budget of one trace" in proc.stderr
    _, baseline_mb = _run_measured("summary", "--json", str(Path(__file__).parent / "data" / "two_streams.json.gz"))
    print(f"peak {peak_mb} MB, a tiny trace's {baseline_mb} MB")
    assert peak_mb < baseline_mb + 100, (peak_mb, baseline_mb)


def test_a_multi_member_file_past_the_floor_is_judged_by_its_real_ratio(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    # regression: at each member's end the bytes consumed were counted negative (zlib leaves the rest of the input
    # in both unused_data and unconsumed_tail), so any multi-member file past the 64 MB floor was a "bomb"
    monkeypatch.setenv("TRACER_MAX_INFLATED_MB", "0")
    bomb = low_ratio_bomb(tmp_path / "members.json.gz", inflated_mb=80)
    assert sum(len(b) for b in iter_inflated(bomb, bomb.read_bytes())) > 80e6
