"""The what-if plan ``balance`` checked against a real re-run: the ``ddp`` scenario recorded with uneven shards
(``-p skew=0.6``: rank 0 takes 1.6× its equal share of each minibatch) and with equal ones (``skew=0``), two gloo
ranks on this CPU, each recorded ``--repeat`` times in turn; the skewed job replayed with ``balance``. Prints each
recording's spans and, for the shortest (least disturbed) recording of each, the prediction's error against the
even re-run beside the skewed span's own. A timing comparison on a shared machine: a benchmark, not a test
(tests/test_ddp_skew.py checks the scenario and the plan without timing them). docs/explain.md quotes it.

    GLOO_SOCKET_IFNAME=lo PYTHONPATH=. python bench/balance_rerun.py [--repeat 3] [--skew 0.6]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys
import tempfile
from pathlib import Path

from tracer.cli import main as tracer_main
from tracer.explain import build_graph
from tracer.explain.replay import Plan, replay
from tracer.files.rundir import read_meta
from tracer.files.storage import read_timeline_parquet

#: big enough that the ranks' compute, not their start-up, fills the profiled steps (~70 ms a step on rank 0 at
#: skew 0.6 on a 2-core machine), small enough to record in ~15 s
SIZES = ["-p", "ranks=2", "-p", "steps=4", "-p", "batch=2048", "-p", "inputs=256", "-p", "hidden=512"]


def record(out: Path, skew: float) -> Path:
    """One ddp job recorded at ``skew``; its run directory (the scenario's own correctness checks must pass)."""
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = tracer_main(["record", "ddp", "--device", "cpu", "--out", str(out), "-q", *SIZES, "-p", f"skew={skew}"])
    if rc != 0:
        raise SystemExit(f"balance_rerun: recording ddp at skew={skew} failed (exit {rc})")
    run = Path(buf.getvalue().strip().splitlines()[-1])
    meta = read_meta(run)
    if not all(c["ok"] for c in meta.checks.values()):
        raise SystemExit(f"balance_rerun: ddp at skew={skew}: a correctness check failed: {meta.checks}")
    return run


def spans(run: Path, balance: bool) -> tuple[float, float]:
    """(measured, predicted) span of a run's profiled window, ms; predicted under ``balance`` or unchanged."""
    r = replay(build_graph(read_timeline_parquet(run / "timeline.parquet")), Plan(balance=balance))
    return r.measured_ns / 1e6, r.predicted_ns / 1e6


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3, help="recordings of each job, in turn (default 3)")
    ap.add_argument("--skew", type=float, default=0.6, help="rank 0's extra share of each minibatch (default 0.6)")
    args = ap.parse_args(argv)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    skewed: list[tuple[float, float]] = []
    even: list[float] = []
    with tempfile.TemporaryDirectory(prefix="balance-rerun-") as tmp:
        for k in range(args.repeat):
            skewed.append(spans(record(Path(tmp) / f"skewed{k}", args.skew), balance=True))
            even.append(spans(record(Path(tmp) / f"even{k}", 0.0), balance=False)[0])
            print(f"#{k + 1}: skewed measured {skewed[-1][0]:.1f} ms, balance predicted {skewed[-1][1]:.1f} ms, "
                  f"even measured {even[-1]:.1f} ms", file=sys.stderr)
    (skewed_ms, predicted_ms), even_ms = min(skewed), min(even)
    print("| skewed, measured | balance, predicted | even, measured | prediction error | skewed − even |")
    print("| ---: | ---: | ---: | ---: | ---: |")
    print(f"| {skewed_ms:.1f} ms | {predicted_ms:.1f} ms | {even_ms:.1f} ms | {predicted_ms - even_ms:+.1f} ms "
          f"({100 * (predicted_ms - even_ms) / even_ms:+.0f}%) | {skewed_ms - even_ms:+.1f} ms |")
    closer = abs(predicted_ms - even_ms) < abs(skewed_ms - even_ms)
    print(f"\nthe prediction is {'closer to' if closer else 'NOT closer to'} the even re-run than the skewed span is "
          f"(shortest of {args.repeat} recordings each)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
