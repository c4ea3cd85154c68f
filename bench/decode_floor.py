"""Benchmark: how fast a Kineto trace can be read per CPU-second with msgspec at all, against the whole parse, and
against issue 39's per-core target (354 MB per CPU-second: twice Perfetto's 177 MB/s on one core).

The trace's events are cut into the chunks the parser decodes (``tracer.parsers.kineto_scan``'s gaps), then each
floor decodes every chunk, on one process, its best of ``--repeat`` CPU times:

    delimit         each event as raw bytes (``list[msgspec.Raw]``): the JSON scanned, nothing built
    empty structs   each event as a struct with no field (every key skipped)
    fields, no args the fields the timeline needs but ``args`` (cat, name, pid, tid, ts, dur)
    typed decode    what the parser decodes (those fields and the args it reads, by phase)
    whole parse     ``load_trace(path, cache=False)`` on one process (TRACER_PARSE_PROCESSES=1)

A floor at or under the target says that no Python code around that decode can reach it.

    python bench/decode_floor.py --factor 10           # the x10 scale-up of the bundled rank trace (114 MB)
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any, Union

sys.path.insert(0, str(Path(__file__).resolve().parent))

import msgspec
from _common import best
from synth import scaled_trace

SOURCE = Path(__file__).resolve().parents[1] / "tests" / "data" / "mlp_train_200.json.gz"
#: issue 39: twice Perfetto's trace processor (177 MB/s of JSON on one core, its PR #1641)
TARGET_MB_PER_CPU_S = 354.0


def _chunks(data: bytes) -> list[bytes]:
    from tracer.parsers import kineto_scan as ks

    key = ks._EVENTS_KEY_RE.search(data)
    if key is None:
        raise SystemExit("no traceEvents in the trace")
    pieces, pos, view = [], key.end(), memoryview(data)
    while (gap := ks._EVENT_GAP_RE.search(data, pos + ks._CHUNK_BYTES)) is not None:
        pieces.append(b"".join((b"[", view[pos : gap.start() + 1], b"]")))
        pos = gap.end() - 1
    return pieces


def _decoders() -> dict[str, msgspec.json.Decoder[Any]]:
    from tracer.parsers import kineto_scan as ks

    class Empty(msgspec.Struct, gc=False):
        pass

    class NoArgs(msgspec.Struct, gc=False, tag_field="ph", tag="X"):
        cat: str = ""
        name: str = ""
        pid: int | str | None = None
        tid: int | str | None = None
        ts: msgspec.Raw = ks._NO_RAW
        dur: msgspec.Raw = ks._NO_RAW

    others = tuple(msgspec.defstruct(f"_S{i}", [], gc=False, tag_field="ph", tag=ph)
                   for i, ph in enumerate([*ks._OTHER_PHASES, "B", "E", "M"]))
    return {
        "delimit": msgspec.json.Decoder(list[msgspec.Raw]),
        "empty structs": msgspec.json.Decoder(list[Empty]),
        "fields, no args": msgspec.json.Decoder(list[Union[(NoArgs,) + others]]),  # type: ignore[misc]  # noqa: UP007
        "typed decode": ks._TAGGED_LIST_DECODER,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--factor", type=int, default=10, help="the scale-up of the source trace (default 10: 114 MB)")
    ap.add_argument("--source", type=Path, default=SOURCE, help="the rank trace to scale up")
    ap.add_argument("--repeat", type=int, default=5, help="runs of each; the best CPU time is kept (default 5)")
    args = ap.parse_args(argv)
    os.environ["TRACER_PARSE_PROCESSES"] = "1"
    from tracer.parsers import load_trace

    path = scaled_trace(args.factor, args.source)
    data = path.read_bytes()
    mb = len(data) / 1e6
    pieces = _chunks(data)
    rows: list[tuple[str, float]] = []
    for name, dec in _decoders().items():
        rows.append((name, best(lambda d=dec: [d.decode(p) for p in pieces], args.repeat, time.process_time)))
    rows.append(("whole parse", best(lambda: load_trace(path, cache=False), args.repeat, time.process_time)))
    print(f"\n{path.name}: {mb:,.0f} MB, {len(pieces)} chunks; one process, best of {args.repeat} CPU times; "
          f"{os.cpu_count()} cores\n")
    print("| what | CPU s | MB per CPU-s | left for the rest at the target |")
    print("| --- | ---: | ---: | ---: |")
    budget = mb / TARGET_MB_PER_CPU_S
    for name, cpu in rows:
        left = "" if name == "whole parse" else f"{budget - cpu:+.3f} s"
        print(f"| {name} | {cpu:.3f} | {mb / cpu:,.0f} | {left} |")
    print(f"\nthe target, {TARGET_MB_PER_CPU_S:g} MB per CPU-s, is {budget:.3f} CPU-s for the whole parse of this file")
    return 0


if __name__ == "__main__":
    sys.exit(main())
