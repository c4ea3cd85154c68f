"""What recording costs: a scenario unprofiled, under torch.profiler directly, and under `tracer record`.

    python bench/record.py [--scenario multi-device] [--device auto] [--repeat 5] [-p NAME=VALUE ...] [--json F]

Each repetition runs the three modes one after another (in a rotating order, so that drift and warm caches do
not favour one). What is compared is the scenario's *profiled window* — the part `tracer record` traces (the
timed variants; set-up, warm-up and checks are outside it) — measured by the scenario itself with
``time.perf_counter`` after synchronising the devices:

* unprofiled:      ``run_scenario(...)`` with no profiler;
* torch.profiler:  ``run_scenario(..., profiler=lambda: torch.profiler.profile(**same settings))``; the window
  includes the profiler's own start and stop;
* tracer record:   ``tracer.record.scenario.record(...)``, the function behind the CLI (same profiler settings).

tracer's own cost beyond torch.profiler is the difference of the last two medians. The work done *after* the
window (trace export, parsing, Parquet and JSON writing) is reported separately: torch.profiler's export is
common to both; parsing and writing are tracer's alone.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tracer.record.profiler import torch_profiler_settings
from tracer.record.scenario import record  # noqa: E402
from tracer.scenarios import parse_param_args, prepare, run_scenario  # noqa: E402


def unprofiled(name: str, device: str, params: dict[str, str]) -> dict[str, float]:
    r = run_scenario(name, device, params)
    return {"window": r.profiled_window_s or 0.0}


def torch_profiler(name: str, device: str, params: dict[str, str], tmp: Path) -> dict[str, float]:
    from torch.profiler import profile

    settings = torch_profiler_settings(all_threads=not prepare(name, device, params)[1].on_gpu)
    holder = {}

    def factory():  # noqa: ANN202
        holder["p"] = profile(**settings)
        return holder["p"]

    r = run_scenario(name, device, params, profiler=factory)
    t0 = time.perf_counter()
    holder["p"].export_chrome_trace(str(tmp / "trace.json.gz"))
    return {"window": r.profiled_window_s or 0.0, "export": time.perf_counter() - t0}


def tracer_record(name: str, device: str, params: dict[str, str], tmp: Path) -> dict[str, float]:
    run = record(name, device=device, out=tmp, params=params)
    return {"window": run.meta["profiled_window_s"], **{k: v for k, v in run.stages_s.items() if k != "workload"}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenario", default="multi-device")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--param", "-p", action="append", default=[])
    ap.add_argument("--json", type=Path, help="also write the raw numbers here")
    args = ap.parse_args(argv)
    params = parse_param_args(args.param)
    _, plan, values, _ = prepare(args.scenario, args.device, params)

    modes = ["unprofiled", "torch.profiler", "tracer record"]
    samples: dict[str, list[dict[str, float]]] = {m: [] for m in modes}
    with tempfile.TemporaryDirectory(prefix="tracer-bench-") as tmpdir:
        tmp = Path(tmpdir)
        run_scenario(args.scenario, args.device, params)  # warm: imports, allocator, first-call costs
        for rep in range(args.repeat):
            order = modes[rep % 3:] + modes[: rep % 3]
            for m in order:
                d = tmp / f"{rep}-{m.replace(' ', '_')}"
                d.mkdir()
                if m == "unprofiled":
                    samples[m].append(unprofiled(args.scenario, args.device, params))
                elif m == "torch.profiler":
                    samples[m].append(torch_profiler(args.scenario, args.device, params, d))
                else:
                    samples[m].append(tracer_record(args.scenario, args.device, params, d))

    med = {m: statistics.median(s["window"] for s in samples[m]) for m in modes}
    print(f"scenario {args.scenario}, {plan.mode} ({', '.join(plan.devices)}), params "
          + ", ".join(f"{k}={v}" for k, v in values.items()) + f", {args.repeat} repetitions")
    print(f"{'mode':16} {'window median ms':>17} {'min ms':>9} {'max ms':>9} {'vs unprofiled':>14} "
          f"{'vs torch.profiler':>18}")
    for m in modes:
        w = [s["window"] for s in samples[m]]
        print(f"{m:16} {med[m] * 1e3:17.2f} {min(w) * 1e3:9.2f} {max(w) * 1e3:9.2f} "
              f"{(med[m] / med['unprofiled'] - 1) * 100:+13.1f}% {(med[m] / med['torch.profiler'] - 1) * 100:+17.1f}%")
    after = {k: statistics.median(s.get(k, 0.0) for s in samples["tracer record"])
             for k in ("export", "parse", "write")}
    tp_export = statistics.median(s["export"] for s in samples["torch.profiler"])
    print(f"after the window (medians): torch.profiler export {tp_export * 1e3:.0f} ms; tracer record: export "
          f"{after['export'] * 1e3:.0f} ms + parse {after['parse'] * 1e3:.0f} ms + write {after['write'] * 1e3:.0f} ms")
    if args.json:
        args.json.write_text(json.dumps({"scenario": args.scenario, "mode": plan.mode, "devices": plan.devices,
                                         "params": values, "samples": samples}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
