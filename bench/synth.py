"""Synthetic scale-ups of a real Kineto trace: the same events replicated N times, end to end in time.

Copy ``k`` (0-based) of every event is shifted by ``k * span_us`` in time and by ``k * id_stride`` in every id
that links events (``args.correlation``, ``args["External id"]``, the Python ids, and the ``id`` of "s"/"f"
flow events), so the scaled trace is as well-formed as the original: flows still join their runtime call
and GPU activity, and nothing collides across copies. Process/thread-name metadata ("M") and the profiler's
own bookkeeping (``cat == "Trace"`` spans, "i" instants) appear once.

The events are rewritten as text: the file keeps Kineto's layout (indented JSON) byte for byte, and a
timestamp keeps its exact decimals, because the shift is added to the integer microseconds and the fraction
is copied (a float addition at ~5e12 µs, where one double ulp is ~1 ns, could move the last digit).

The output is plain (not gzipped) JSON, since the performance targets are about the uncompressed size.
Scaled files are cached (default ``$TRACER_BENCH_DIR`` or ``/tmp/tracer-bench``) and reused while the
source trace is unchanged.

    python bench/synth.py --factor 10            # prints the path of the x10 trace, generating it if needed
"""

from __future__ import annotations

import argparse
import gzip
import math
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

import msgspec
import orjson

DEFAULT_SOURCE = (
    Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "h200" / "mlp_train_200.json.gz"
)
DEFAULT_DIR = Path(os.environ.get("TRACER_BENCH_DIR", "/tmp/tracer-bench"))

#: args keys that hold ids linking events across a trace (they are shifted per copy).
ID_ARGS = ("correlation", "External id", "Python id", "Python parent id")


class _Kind(msgspec.Struct):
    ph: str = ""
    cat: str = ""


class _Top(msgspec.Struct):
    traceEvents: msgspec.Raw = msgspec.Raw(b"[]")


#: A linking number in an event's text: timestamp, flow id or one of ID_ARGS.
_NUM_RE = re.compile(rb'"(ts|id|correlation|External id|Python id|Python parent id)"(\s*:\s*)(-?\d+)(\.\d+)?')
_KIND_DECODER = msgspec.json.Decoder(_Kind)


def _read_source(source: Path) -> bytes:
    data = source.read_bytes()
    return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data


def _is_once(kind: _Kind) -> bool:
    return kind.ph in ("M", "i") or kind.cat == "Trace"


def _stride(max_id: int) -> int:
    """A power of ten above every id, so shifted ids stay readable (138954 -> 1138954 in copy 1)."""
    return 10 ** max(1, len(str(max(max_id, 1))))


def write_scaled(source: Path, factor: int, out: Path) -> dict[str, Any]:
    """Write ``source`` replicated ``factor`` times to ``out``; return a summary (events, bytes, span).

    The events are rewritten as text, not decoded and re-encoded, so the scaled file keeps the source's exact
    layout (Kineto indents its JSON, which is part of what a parser has to chew through) and every number
    other than the shifted ones is byte-for-byte the source's.
    """
    data = _read_source(source)
    arr = bytes(msgspec.json.decode(data, type=_Top).traceEvents)
    arr_at = data.index(b"[", data.index(b'"traceEvents"'))
    if data[arr_at : arr_at + len(arr)] != arr:
        raise ValueError(f"{source}: cannot locate the traceEvents array")
    head, tail = data[:arr_at], data[arr_at + len(arr) :]
    raws = [bytes(r) for r in msgspec.json.decode(arr, type=list[msgspec.Raw])]
    if len(raws) > 1:
        gap_at = arr.index(raws[0]) + len(raws[0])
        sep = arr[gap_at : arr.index(raws[1], gap_at)]
    else:
        sep = b", "
    once, rep = [], []
    for r in raws:
        (once if _is_once(_KIND_DECODER.decode(r)) else rep).append(r)

    # Template of the replicated events: literal text between the numbers, and the numbers themselves.
    lits: list[bytes] = []
    nums: list[tuple[bool, int, bytes]] = []  # (is a timestamp, integer part, fraction text incl. ".")
    t0 = t1 = None
    max_id = 0
    body = sep.join(rep)
    pos = 0
    for m in _NUM_RE.finditer(body):
        key, whole, frac = m.group(1), int(m.group(3)), m.group(4) or b""
        lits.append(body[pos : m.start(3)])
        is_ts = key == b"ts"
        nums.append((is_ts, whole, frac))
        if not is_ts:
            max_id = max(max_id, whole)
        pos = m.end()
    tail_lit = body[pos:]
    for r in rep:  # span of the replicated events, to place copies end to end
        ev = orjson.loads(r)
        ts = ev.get("ts")
        if isinstance(ts, (int, float)):
            end = ts + (ev.get("dur") or 0)
            t0 = ts if t0 is None else min(t0, ts)
            t1 = end if t1 is None else max(t1, end)
    span_us = math.ceil((t1 or 0) - (t0 or 0)) + 1
    id_stride = _stride(max_id)

    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    with open(tmp, "wb") as f:
        f.write(head + b"[" + arr[1 : arr.index(raws[0])] if raws else head + b"[")
        if once:
            f.write(sep.join(once))
        for k in range(factor):
            dt, di = k * span_us, k * id_stride
            parts = []
            for lit, (is_ts, whole, frac) in zip(lits, nums):
                parts.append(lit)
                parts.append(b"%d%s" % (whole + (dt if is_ts else di), frac))
            parts.append(tail_lit)
            if once or k:
                f.write(sep)
            f.write(b"".join(parts))
        f.write(arr[arr.rindex(raws[-1]) + len(raws[-1]) :] if raws else b"]")
        f.write(tail)
    os.replace(tmp, out)
    return {
        "events": len(once) + factor * len(rep),
        "bytes": out.stat().st_size,
        "span_us": span_us,
        "id_stride": id_stride,
    }


def scaled_trace(factor: int, source: Path = DEFAULT_SOURCE, cache_dir: Path = DEFAULT_DIR) -> Path:
    """Path of the plain-JSON ×``factor`` trace in ``cache_dir``, generated if missing or older than ``source``."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    stem = source.name.removesuffix(".gz").removesuffix(".json")
    out = cache_dir / f"{stem}_x{factor}.json"
    if not out.exists() or out.stat().st_mtime < source.stat().st_mtime or not _info_path(out).exists():
        t = time.perf_counter()
        info = write_scaled(source, factor, out)
        _info_path(out).write_bytes(orjson.dumps(info))
        print(
            f"synth: wrote {out} ({info['bytes'] / 1e6:.0f} MB, {info['events']} events) "
            f"in {time.perf_counter() - t:.1f} s",
            file=sys.stderr,
        )
    return out


def _info_path(trace: Path) -> Path:
    return trace.with_name(trace.name + ".info.json")


def trace_info(trace: Path) -> dict[str, Any]:
    """Events and bytes of a trace: from the sidecar :func:`scaled_trace` wrote, else by counting."""
    info_path = _info_path(trace)
    if info_path.exists():
        info = orjson.loads(info_path.read_bytes())
        if info.get("bytes") == trace.stat().st_size:
            return info
    data = _read_source(trace)
    events = len(
        msgspec.json.decode(msgspec.json.decode(data, type=_Top).traceEvents, type=list[msgspec.Raw])
    )
    return {"events": events, "bytes": len(data)}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--factor", type=int, default=10, help="how many copies of the source's events")
    ap.add_argument(
        "--source", type=Path, default=DEFAULT_SOURCE, help="Kineto trace to scale (.json or .json.gz)"
    )
    ap.add_argument("--dir", type=Path, default=DEFAULT_DIR, help="where scaled traces are cached")
    args = ap.parse_args(argv)
    print(scaled_trace(args.factor, args.source, args.dir))


if __name__ == "__main__":
    main()
