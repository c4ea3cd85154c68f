"""``python -m tracer.record SCENARIO ...``: ``tracer record`` without the CLI's dependencies.

The same options and the same run directory as ``tracer record``, with argparse and plain-text output instead of
Typer and Rich: for machines that have torch, pandas and pyarrow but not the CLI stack (the lent GPU machines).
Exit codes as the CLI: 0, 2 for bad input (one line on stderr), 1 when the run could not be written (a full disk),
130 when interrupted.
"""

from __future__ import annotations

import argparse
import sys

from tracer.errors import TracerError
from tracer.files import atomic


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tracer.record", description=__doc__.split("\n\n")[0])
    ap.add_argument("scenario")
    ap.add_argument("--device", "-d", default="auto")
    ap.add_argument("--out", "-o", default="runs")
    ap.add_argument("--backend", "-b", default="torch")
    ap.add_argument("--param", "-p", action="append", default=[], metavar="NAME=VALUE")
    ap.add_argument("--quiet", "-q", action="store_true")
    args = ap.parse_args(argv)
    # (after the arguments: --help and a usage error answer without pandas, ~0.9 s, and torch, several seconds;
    # the recorder, and its side that reads the parameters as the scenarios do)
    from tracer.record import scenario, scenario_run

    def progress(msg: str) -> None:
        if not args.quiet:
            print(f"  … {msg}", file=sys.stderr, flush=True)

    published_before = len(atomic.published)
    try:
        params = scenario_run.parse_params(args.param)
        run = scenario.record(args.scenario, device=args.device, out=args.out, backend=args.backend, params=params,
                     progress=progress)
    except TracerError as exc:
        print(f"tracer: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        kept = atomic.published[published_before:]
        print("tracer: interrupted" + (f" after the run was written (it is complete and kept): {kept[-1]}"
                                       if kept else ""), file=sys.stderr)
        return 130
    print(run.path if args.quiet else scenario.plain_report(run.meta, run.summary, run.path), flush=True)
    return 0

