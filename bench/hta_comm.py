"""tracer's per-rank communication figures beside Holistic Trace Analysis' ``get_comm_comp_overlap`` on the same
traces (docs/analyses.md, "Communication", quotes its output).

HTA is not a dependency of tracer: it runs in its own virtual environment, given by ``--hta-python`` (a Python
with the ``HolisticTraceAnalysis`` package), as a child process over a folder holding the job's traces as
``rank-N.json.gz``. HTA is asked with ``include_last_profiler_step=True``: by default it drops each rank's last
ProfilerStep (on HTA's rank-0/1 pair: half of the kernels), where tracer counts every event of the trace.

    python bench/hta_comm.py --hta-python /work/hta-venv/bin/python
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tracer.analysis.comm import device_comm  # noqa: E402
from tracer.job.load import load_job  # noqa: E402

EXTERNAL = ROOT / "tests" / "data" / "external"
JOBS = {
    "HTA trace_filter rank 0+1 (NCCL, names only)": [EXTERNAL / f"HTA_trace_filter_sampled_rank-{r}.json.gz"
                                                     for r in (0, 1)],
    "HTA nccl_parser_config (NCCL metadata)": [EXTERNAL / "HTA_nccl_parser_config_nccl_data.json.gz"],
    "TraceLens MI300 (ROCm, RCCL)": [EXTERNAL / "TraceLens_mi300_resnet_act_checkpoint.json.gz"],
}

HTA_SCRIPT = """
import json, logging, sys
logging.disable(logging.WARNING)
from hta.trace_analysis import TraceAnalysis
try:
    ta = TraceAnalysis(trace_dir=sys.argv[1], include_last_profiler_step=True)
    df = ta.get_comm_comp_overlap(visualize=False)
    print(json.dumps({int(r): float(p) for r, p in zip(df["rank"], df["comp_comm_overlap_pctg"])}))
except Exception as exc:
    print(json.dumps({"error": f"{type(exc).__name__}: {exc}"[:200]}))
"""


def hta_overlap(python: str, paths: list[Path]) -> dict[str, object]:
    """HTA's comp_comm_overlap_pctg per rank (or its error), run by ``python`` over a copy of the job's traces."""
    with tempfile.TemporaryDirectory() as tmp:
        for rank, p in enumerate(paths):
            shutil.copy(p, Path(tmp) / f"rank-{rank}.json.gz")
        out = subprocess.run([python, "-c", HTA_SCRIPT, tmp], capture_output=True, text=True, timeout=600)
        lines = out.stdout.strip().splitlines()
        return json.loads(lines[-1]) if lines else {"error": out.stderr.strip().splitlines()[-1:]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hta-python", help="a Python with HTA installed (omit: tracer's figures only)")
    args = ap.parse_args()
    print("| job | rank | compute ms | comm ms | overlap ms | exposed ms | tracer hidden % | HTA overlap % |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, paths in JOBS.items():
        hta = hta_overlap(args.hta_python, paths) if args.hta_python else {}
        for d in device_comm(load_job(paths).events):
            theirs = hta.get(str(d.rank), hta.get("error", "–")) if isinstance(hta, dict) else "–"
            theirs = f"{theirs:.2f}" if isinstance(theirs, float) else str(theirs)
            print(f"| {name} | {d.rank} | {d.compute_ns / 1e6:,.3f} | {d.comm_ns / 1e6:,.3f} | "
                  f"{d.overlap_ns / 1e6:,.3f} | {d.exposed_comm_ns / 1e6:,.3f} | {d.comm_hidden_pct:.2f} | {theirs} |")


if __name__ == "__main__":
    main()
