"""``python -m tracer.scenarios``: list the scenarios, or run one without any profiler of tracer's own.

``tracer record --backend nsys`` starts ``python -m tracer.scenarios run NAME --result FILE --cuda-profiler-range``
under ``nsys profile --capture-range=cudaProfilerApi``: the scenario's profiled window then calls
``cudaProfilerStart``/``Stop`` so that Nsight Systems captures the same part that torch.profiler would.
Standard library and torch only: this runs on machines where tracer's own dependencies may be missing.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path

from tracer.scenarios.registry import all_scenarios, parse_param_args, run_scenario
from tracer.scenarios.runtime import ScenarioError


@contextlib.contextmanager
def cuda_profiler_range() -> Iterator[None]:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()
        torch.cuda.profiler.start()
    try:
        yield
    finally:
        if torch.cuda.is_available():
            torch.cuda.synchronize()
            torch.cuda.profiler.stop()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tracer.scenarios", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("list", help="the scenarios, their variants and parameters")
    r = sub.add_parser("run", help="run one scenario and print (or save) its result as JSON")
    r.add_argument("name")
    r.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:0,cuda:1,...")
    r.add_argument("--param", "-p", action="append", default=[], metavar="NAME=VALUE")
    r.add_argument("--result", type=Path, help="write the result JSON here instead of stdout")
    r.add_argument("--cuda-profiler-range", action="store_true",
                   help="call cudaProfilerStart/Stop around the profiled window (for nsys --capture-range)")
    r.add_argument("--progress", action="store_true", help="print each phase on stderr as it starts")
    args = ap.parse_args(argv)

    if args.cmd == "list":
        for s in all_scenarios():
            print(f"{s.name:18} {s.description}")
            for p in s.all_params():
                print(f"    {p.name:10} cpu={p.cpu!s:<8} gpu={p.gpu!s:<8} {p.help}")
        return 0

    def show(phase: str) -> None:
        print(f"[scenarios] {phase}", file=sys.stderr, flush=True)

    try:
        result = run_scenario(
            args.name,
            args.device,
            parse_param_args(args.param),
            on_phase=show if args.progress else None,
            profiler=cuda_profiler_range if args.cuda_profiler_range else None,
        )
    except ScenarioError as exc:
        print(f"scenarios: error: {exc}", file=sys.stderr)
        return 2
    text = json.dumps(result.to_dict(), indent=1, sort_keys=False)
    if args.result:
        args.result.write_text(text)
    else:
        print(text)
    if not result.ok:
        print("scenarios: check failed: " + "; ".join(result.failed_checks()), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
