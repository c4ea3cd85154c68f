"""Job run directories for tests: real rank traces copied under ``traces/`` the way ``tracer record`` lays out a
job, with a meta.json, and derived (timeline.parquet, summary.json) as the recorder leaves them."""

from __future__ import annotations

import shutil
from pathlib import Path

from tracer.files import rundir
from tracer.files.rundir import RunMeta
from tracer.record.derive import derive

DATA = Path(__file__).parent / "data"
#: HTA's two-rank sample (NCCL kernels; rank 1 runs on GPU 1)
HTA_RANKS = [DATA / "external" / f"HTA_trace_filter_sampled_rank-{r}.json.gz" for r in (0, 1)]
#: a two-rank gloo job on the CPU (host records of the collectives, no GPU)
GLOO_RANKS = [DATA / "comm" / f"gloo_rank{r}.json.gz" for r in (0, 1)]


def make_job_run(out: Path, traces: list[Path], scenario: str = "ddp") -> Path:
    """``out`` made a job's run directory of ``traces`` (rank r = the r-th), derived; returns ``out``."""
    (out / rundir.TRACES_DIR).mkdir(parents=True, exist_ok=True)
    for rank, trace in enumerate(traces):
        shutil.copy(trace, out / rundir.TRACES_DIR / f"rank{rank}-pid{100 + rank}.json.gz")
    rundir.write_meta(out, RunMeta.from_dict({"scenario": scenario, "params": {"ranks": len(traces)}}))
    derive(out)
    return out
