"""The long fuzz campaign: seeded mutations of the real traces through ``tracer summary --json``.

    python bench/fuzz.py [--cases 3000] [--seed 1] [--json F]

The engine is tests/fuzzing.py (tests/test_fuzz.py runs a short, fixed set of the same cases in CI). Prints one
table: per input class and mutation, how many inputs were tried, parsed (exit 0, sane figures), refused (exit 2,
one line) and defects (anything else), with the worst time and the worst peak-RSS growth of one input. The
defects, if any, are listed below the table with the case that reproduces them (source:mutation:seed).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import fuzzing  # noqa: E402  (tests/fuzzing.py)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", type=int, default=3000, help="how many inputs (default 3000)")
    ap.add_argument("--seed", type=int, default=1, help="campaign seed (CI's test uses 0)")
    ap.add_argument("--json", type=Path, help="also write every outcome to this file")
    args = ap.parse_args()

    t0 = time.perf_counter()
    done = 0

    def progress(_: fuzzing.Outcome) -> None:
        nonlocal done
        done += 1
        if done % 100 == 0:
            print(f"  {done}/{args.cases} in {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)

    with tempfile.TemporaryDirectory() as work:
        outcomes = fuzzing.run_all(args.cases, Path(work), seed=args.seed, progress=progress)
    wall = time.perf_counter() - t0

    rows: dict[tuple[str, str], dict[str, float]] = defaultdict(
        lambda: {"tried": 0, "parsed": 0, "refused": 0, "defects": 0, "max_s": 0.0, "max_mb": 0.0})
    for o in outcomes:
        for key in ((o.case.klass, o.case.mutation), (o.case.klass, "(all)"), ("all", "(all)")):
            r = rows[key]
            r["tried"] += 1
            r["defects" if o.defect else o.verdict] += 1
            r["max_s"] = max(r["max_s"], o.seconds)
            r["max_mb"] = max(r["max_mb"], o.rss_growth_mb)

    print(f"{args.cases} cases, seed {args.seed}, {wall:.0f} s wall\n")
    print("| class | mutation | tried | parsed | refused | defects | max s | max RSS growth MB |")
    print("| --- | --- | --: | --: | --: | --: | --: | --: |")
    for (klass, mutation), r in sorted(rows.items(), key=lambda kv: (kv[0][0] == "all", kv[0][0], kv[0][1])):
        print(f"| {klass} | {mutation} | {r['tried']:.0f} | {r['parsed']:.0f} | {r['refused']:.0f} | "
              f"{r['defects']:.0f} | {r['max_s']:.2f} | {r['max_mb']:.0f} |")
    defects = [o for o in outcomes if o.defect]
    for o in defects[:50]:
        last = o.stderr.strip().splitlines()[-1:] if o.stderr else []
        print(f"DEFECT {o.case.label}: {o.verdict} {last}")
    if args.json:
        args.json.write_text(json.dumps([
            {"case": o.case.label, "class": o.case.klass, "verdict": o.verdict, "rc": o.rc,
             "seconds": round(o.seconds, 3), "rss_growth_mb": round(o.rss_growth_mb, 1)} for o in outcomes]))
    return 1 if defects else 0


if __name__ == "__main__":
    sys.exit(main())
