"""``python -m tracer.record SCENARIO ...``: ``tracer record`` without the CLI's dependencies.

The same options and the same run directory as ``tracer record``, with argparse and plain-text output instead of
Typer and Rich: for machines that have torch, pandas and pyarrow but not the CLI stack (the lent GPU machines).
Exit codes as the CLI: 0, 2 for bad input (one line on stderr), 1 when the run could not be written (a full disk),
130 when interrupted.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from typing import Any

from tracer.errors import TracerError


def plain_report(meta: dict[str, Any], summary: Mapping[str, Any], path: Any) -> str:
    """The run's report as plain text; ``summary`` a :class:`~tracer.analysis.summary.Summary` or its JSON."""
    from tracer.analysis.summary import Summary
    from tracer.timeline import device_label

    lines = [
        f"{meta['scenario']}  variant {meta['variant']}  {meta['mode']} ({', '.join(meta['devices'])})  "
        f"backend {meta['backend']}"
    ]
    if meta.get("gpu_names"):
        lines.append("GPUs: " + ", ".join(f"{k}: {v}" for k, v in meta["gpu_names"].items()))
    unprofiled = set(meta.get("unprofiled_times", []))
    samples = meta.get("wall_time_samples_s") or {}  # absent in runs recorded before repeats existed
    lines.append("wall time (ms):")
    for name, secs in meta["wall_times_s"].items():
        how = ["reference, not profiled"] if name in unprofiled else []
        if len(samples.get(name, ())) > 1:
            how.append(f"median of {len(samples[name])}")
        lines.append(f"  {name:32} {secs * 1e3:12.2f}{'   (' + '; '.join(how) + ')' if how else ''}")
    for k, v in meta.get("derived", {}).items():
        lines.append(f"  {k:48} {v:10.3f}")
    typed = summary if isinstance(summary, Summary) else Summary.from_dict(summary)
    for d in typed.devices:
        hidden = "-" if d.copy_hidden_pct is None else f"{d.copy_hidden_pct:.1f}%"
        lines.append(
            f"GPU {device_label(d.key, typed.multi_rank)}: {d.kernels} kernels, {d.memcpys} copies; "
            f"compute {d.compute_ns / 1e6:.2f} ms, copy {d.copy_ns / 1e6:.2f} ms, overlap {d.overlap_ns / 1e6:.2f} ms "
            f"({hidden} of copy hidden)"
        )
    checks = meta.get("checks", {})
    lines.append(("checks passed: " if all(c["ok"] for c in checks.values()) else "CHECKS FAILED: ")
                 + "; ".join(f"{k} [{c['detail']}]" for k, c in checks.items()))
    lines += [f"note: {note}" for note in meta.get("notes", [])]  # what a figure means here, what was left out
    lines.append(f"run written to {path}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tracer.record", description=__doc__.split("\n\n")[0])
    ap.add_argument("scenario")
    ap.add_argument("--device", "-d", default="auto")
    ap.add_argument("--out", "-o", default="runs")
    ap.add_argument("--backend", "-b", default="torch")
    ap.add_argument("--param", "-p", action="append", default=[], metavar="NAME=VALUE")
    ap.add_argument("--quiet", "-q", action="store_true")
    args = ap.parse_args(argv)
    from tracer.errors import UsageError
    from tracer.record.scenario import record
    from tracer.scenarios import ScenarioError, parse_param_args

    def progress(msg: str) -> None:
        if not args.quiet:
            print(f"  … {msg}", file=sys.stderr, flush=True)

    try:
        try:
            params = parse_param_args(args.param)
        except ScenarioError as exc:
            raise UsageError("", str(exc)) from None
        run = record(args.scenario, device=args.device, out=args.out, backend=args.backend, params=params,
                     progress=progress)
    except TracerError as exc:
        print(f"tracer: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("tracer: interrupted", file=sys.stderr)
        return 130
    print(run.path if args.quiet else plain_report(run.meta, run.summary, run.path), flush=True)
    return 0

