"""NVTXT export: the file follows the published format, and reading it back gives every interval of the timeline
on the thread of its lane. ImportNvtxt itself is not available here (see docs/exports.md)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tracer.exporters import export_timeline
from tracer.exporters.nvtxt import SYNTHETIC_TID_BASE, clean_message
from tracer.parsers import load_trace
from tracer.timeline import Timeline, TraceMeta, build_events

DATA = Path(__file__).parent / "data"
LINE = re.compile(r'^RangeStartEnd, (\d+), (\d+), (\d+), "([^"\r\n]*)"$')


def _read(path: Path) -> tuple[list[str], list[tuple[int, int, int, str]]]:
    """Header lines and the ranges, by the published syntax: comments, `Name = value`, `Function, args`."""
    head, ranges = [], []
    for line in path.read_text(encoding="utf-8").splitlines():
        m = LINE.match(line)
        if m:
            ranges.append((int(m[1]), int(m[2]), int(m[3]), m[4]))
        else:
            assert line.startswith("#") or " = " in line or line.startswith(("@", "SetFileDisplayName, ")), line
            head.append(line)
    return head, ranges


@pytest.mark.parametrize("name", ["mlp_train_200.json.gz", "nsys_compute_copy.sqlite.gz"])
def test_every_interval_is_a_range_with_its_exact_times(tmp_path: Path, name: str) -> None:
    timeline = load_trace(DATA / name, cache=False)
    out = export_timeline(timeline, tmp_path / "t.nvtxt").path
    head, ranges = _read(out)
    ev = timeline.events
    assert sorted((s, e, n) for s, e, _, n in ranges) == sorted(
        zip(ev["start_ns"].tolist(), ev["end_ns"].tolist(), [clean_message(str(n)) for n in ev["name"]])
    )
    assert head[-5:] == [
        "@RangeStartEnd, Start, End, ThreadId, Message",
        f"ProcessId = {int(ev.loc[ev['device'] < 0, 'pid'].mode().iat[0])}",
        "CategoryId = 1",
        "Color = Blue",
        "TimeBase = Manual",
    ]
    assert head[-6].startswith("SetFileDisplayName, tracer: ")


def test_lanes_are_named_threads(tmp_path: Path) -> None:
    timeline = load_trace(DATA / "copy_side_stream.json.gz", cache=False)
    head, ranges = _read(export_timeline(timeline, tmp_path / "t.nvtxt").path)
    lanes = {m[1]: m[2] for h in head if (m := re.match(r"^#   (\d+) = (.*)$", h))}
    by_label = {v: int(k) for k, v in lanes.items()}
    assert by_label["thread 424 (python3)"] == 424  # the real thread keeps its id, for merging into a report
    assert by_label["GPU 0 · stream 7 · kernels"] >= SYNTHETIC_TID_BASE
    assert max(by_label.values()) < 1 << 24  # nsys' thread ids are 24 bits
    kernels = {r[3] for r in ranges if r[2] == by_label["GPU 0 · stream 7 · kernels"]}
    assert kernels == {n for n in timeline.events.loc[timeline.events["kind"] == "kernel", "name"].astype(str)}
    copies = [r for r in ranges if r[2] == by_label["GPU 0 · stream 21 · copies"]]
    assert len(copies) == 50


def test_messages_cannot_break_the_line(tmp_path: Path) -> None:
    ev = build_events({"start_ns": [1, 2], "end_ns": [3, 4], "kind": ["range", "range"],
                       "name": ['say "hi"', "two\nlines, and a comma"], "pid": [9, 9], "tid": [9, 9]})
    out = export_timeline(Timeline(ev, TraceMeta(format="test")), tmp_path / "t.nvtxt").path
    _, ranges = _read(out)
    assert sorted(r[3] for r in ranges) == ["say 'hi'", "two lines, and a comma"]
