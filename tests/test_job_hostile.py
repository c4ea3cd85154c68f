"""A job that cannot be one, and a job's figures a reader must be warned of (issue 38.4): a rank from another
run (3.6 years away) refused in one line, a gap in the rank numbers noted, a rank's impossible times noted with
its number. They all passed at exit 0, in silence."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import orjson
import pytest

from tracer.cli import main
from tracer.errors import UsageError
from tracer.job.load import load_job

GLOO = [Path(__file__).parent / "data" / "comm" / f"gloo_rank{r}.json.gz" for r in (0, 1)]
YEAR_NS = int(365.25 * 86_400 * 10**9)


def _rank(out: Path, source: Path, rank: int, *, shift_ns: int = 0, edit: Any = None) -> Path:
    """``source`` (a gloo rank's trace) as rank ``rank``, its clock moved by ``shift_ns``."""
    doc = json.loads(gzip.decompress(source.read_bytes()))
    doc["distributedInfo"]["rank"] = rank
    doc["baseTimeNanoseconds"] += shift_ns
    if edit is not None:
        edit(doc)
    path = out / f"rank{rank}.json.gz"
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return path


def _summary(paths: list[Path], capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = main(["summary", "--job", "--no-cache", "--json", *extra, *map(str, paths)])
    out, err = capsys.readouterr()
    return rc, out, err


def test_a_rank_of_another_run_is_refused_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    paths = [_rank(tmp_path, GLOO[0], 0), _rank(tmp_path, GLOO[1], 1),
             _rank(tmp_path, GLOO[1], 2, shift_ns=int(3.6 * YEAR_NS))]
    rc, out, err = _summary(paths, capsys)
    assert (rc, out) == (2, "")
    assert err == (f"tracer: error: {paths[2]}: rank 2 ran 3.6 years after the job's other ranks (0, 1): not a rank "
                   "of this job (a trace of another run, or a clock off by that much?); leave its trace out\n")
    with pytest.raises(UsageError, match="rank 2 ran 3.6 years after"):  # the whole job read in one frame: the same
        load_job(paths, cache=False)
    # left out, the job reads; a rank two minutes late (a slow start) is one job still
    assert _summary(paths[:2], capsys)[0] == 0
    late = _rank(tmp_path, GLOO[1], 2, shift_ns=120 * 10**9)
    assert _summary([*paths[:2], late], capsys)[:1] == (0,)


def test_two_ranks_years_apart_are_not_one_job(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    paths = [_rank(tmp_path, GLOO[0], 0), _rank(tmp_path, GLOO[1], 1, shift_ns=-2 * YEAR_NS)]
    rc, _, err = _summary(paths, capsys)
    assert rc == 2 and err == (f"tracer: error: {tmp_path}: ranks 0 and 1 ran 2.0 years apart: not one job (traces "
                               "of other runs, or clocks off by that much?)\n")


def test_a_gap_in_the_rank_numbers_is_noted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    paths = [_rank(tmp_path, GLOO[0], 0), _rank(tmp_path, GLOO[1], 1), _rank(tmp_path, GLOO[1], 3)]
    rc, out, err = _summary(paths, capsys)
    note = "ranks 0, 1, 3: rank 2 missing (no trace of it given, or left out): the figures are of the ranks read"
    assert rc == 0 and err == f"tracer: note: {tmp_path}: {note}\n"
    assert orjson.loads(out)["meta"]["notes"] == [note]
    assert load_job(paths, cache=False).meta.extra["notes"] == [note]
    # chosen ranks are no gap
    assert _summary(paths, capsys, "--ranks", "0,3")[2] == ""


def test_a_ranks_impossible_times_are_noted_with_its_number(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    def long_op(doc: dict[str, Any]) -> None:
        op = next(e for e in doc["traceEvents"] if e.get("ph") == "X")
        op["dur"] = 11.6 * 86_400e6  # µs: an 11.6-day operator

    paths = [_rank(tmp_path, GLOO[0], 0), _rank(tmp_path, GLOO[1], 1, edit=long_op)]
    rc, _, err = _summary(paths, capsys)
    assert rc == 0 and err == (
        f"tracer: note: {tmp_path}: rank 1: 1 event lasts longer than a day (the longest 11.6 days): times no "
        "profiler records (damaged, or another clock); the span and the figures over it include them\n")
