"""What `tracer record -- COMMAND` costs a user's script, beyond torch.profiler itself.

    python bench/record_command.py [--steps 200] [--workers 2] [--repeat 3] [--json F]

Runs bench/user_train.py (AMP, a DataLoader with workers, AdamW) three ways, in a rotating order per
repetition so drift favours none, and compares the median step time (the first 10 steps, warm-up, left out;
each step timed by the script with the device synchronised):

* unprofiled:     ``python user_train.py``
* torch.profiler: ``python user_train.py --self-profile`` (torch.profiler started by the script, the settings
  and step schedule tracer uses);
* tracer record:  ``tracer record -- python user_train.py`` (the start-up hook starts the same profiler at
  torch's import; optimizer-step hook; trace saved at exit).

tracer's own cost = tracer record − torch.profiler, as a share of the unprofiled step (the issue's bar: 2%).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "bench" / "user_train.py"
WARMUP = 10


def _step_median(stdout: str) -> float:
    line = next(x for x in reversed(stdout.splitlines()) if x.startswith('{"device"'))
    times = json.loads(line)["step_s"][WARMUP:]
    return statistics.median(times)


def run(mode: str, steps: int, workers: int, out: Path) -> float:
    base = [sys.executable, str(SCRIPT), "--steps", str(steps), "--workers", str(workers)]
    cmd = {
        "unprofiled": base,
        "torch.profiler": [*base, "--self-profile"],
        "tracer record": [sys.executable, "-m", "tracer", "record", "--out", str(out), "--", *base],
        # the profiler started at the first optimizer step (after CUDA's initialisation), not at torch's import
        "tracer --delay": [sys.executable, "-m", "tracer", "record", "--delay", "0.001", "--out", str(out), "--",
                           *base],
    }[mode]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, check=True)
    return _step_median(proc.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--with-delay", action="store_true", help="also: tracer record --delay 0.001 (the profiler "
                                                              "started at the first optimizer step)")
    args = ap.parse_args()
    modes = ["unprofiled", "torch.profiler", "tracer record"] + (["tracer --delay"] if args.with_delay else [])
    got: dict[str, list[float]] = {m: [] for m in modes}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeat):
            for m in modes[r % len(modes):] + modes[: r % len(modes)]:
                got[m].append(run(m, args.steps, args.workers, Path(tmp)))
                print(f"  {m:15s} repeat {r + 1}: median step {got[m][-1] * 1e3:.3f} ms", file=sys.stderr)
    med = {m: statistics.median(v) for m, v in got.items()}
    base = med["unprofiled"]
    print(f"{'mode':16s} {'median step ms':>15s} {'vs unprofiled':>14s}")
    for m in modes:
        print(f"{m:16s} {med[m] * 1e3:15.3f} {100 * (med[m] / base - 1):+13.1f}%")
    own = 100 * (med["tracer record"] - med["torch.profiler"]) / base
    if "tracer --delay" in med:
        late = 100 * (med["tracer --delay"] - med["torch.profiler"]) / base
        print(f"with --delay (profiler from the first optimizer step): {late:+.1f}% of an unprofiled step")
    print(f"tracer's own cost beyond torch.profiler: {own:+.1f}% of an unprofiled step "
          f"({args.steps} steps, {args.workers} workers, {args.repeat} repeats)")
    if args.json:
        args.json.write_text(json.dumps({"median_step_s": med, "samples": got, "own_cost_pct": own}, indent=2))


if __name__ == "__main__":
    main()
