"""The ddp scenario's uneven shards (``-p skew``) and the what-if plan ``balance`` on a job recorded with them:
the shards, the loss weighting that keeps the scenario's correctness check, and one skewed job recorded (two gloo
ranks on this CPU, as tests/test_ddp.py records) and replayed. The plan's prediction against a real re-run is a
timing comparison, measured by bench/balance_rerun.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from tracer.cli import main
from tracer.explain import build_graph
from tracer.explain.replay import Plan, replay
from tracer.files.rundir import read_meta
from tracer.files.storage import read_timeline_parquet
from tracer.scenarios.ddp import make_model, shard_rows

#: rank 0 takes 1.6× its equal share (51 of each minibatch's 64 rows), rank 1 the other 13; small sizes: this
#: records the job, it does not time it
SKEW = 0.6
SIZES = ["-p", "ranks=2", "-p", "steps=3", "-p", "batch=64", "-p", "inputs=16", "-p", "hidden=32"]


@pytest.fixture(autouse=True)
def _loopback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")  # these machines' gloo needs the loopback named


def _record(out: Path, skew: float, capsys: pytest.CaptureFixture[str]) -> Path:
    assert main(["record", "ddp", "--device", "cpu", "--out", str(out), "-q", *SIZES, "-p", f"skew={skew}"]) == 0
    run = Path(capsys.readouterr().out.strip())
    meta = read_meta(run)
    # the trained parameters still match one process on whole minibatches (the loss weighted by shard size)
    assert meta.exit_code == 0 and len(meta.checks) == 2 and all(c["ok"] for c in meta.checks.values()), meta.checks
    return run


@pytest.mark.slow
def test_a_skewed_job_records_with_its_checks_and_balance_replays_it(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    # what the plan does to the spans is timed against real re-runs by bench/balance_rerun.py (a benchmark: on a
    # shared machine one recording varies by ±40%); here, that the skewed job records, its trained parameters
    # still match one process on whole minibatches, and balance evens out its segments
    run = _record(tmp_path / "skewed", SKEW, capsys)
    graph = build_graph(read_timeline_parquet(run / "timeline.parquet"))
    r = replay(graph, Plan(balance=True))
    assert any(n.startswith("balance:") for n in r.notes), r.notes
    assert r.measured_ns > 0 and r.predicted_ns > 0


@pytest.mark.parametrize(("batch", "ranks", "skew", "rows"), [
    (256, 2, 0.0, [128, 128]), (2048, 2, 0.6, [1638, 410]), (100, 3, 0.5, [50, 25, 25]), (10, 3, 0.3, [4, 3, 3]),
    (8, 1, 0.5, [8]),
])
def test_shard_rows(batch: int, ranks: int, skew: float, rows: list[int]) -> None:
    assert shard_rows(batch, ranks, skew) == rows and sum(rows) == batch


@pytest.mark.slow
def test_the_weighted_shard_losses_average_to_the_full_batch_gradient() -> None:
    # what DDP does with the weighted losses (the mean of the ranks' gradients) is the full batch's mean gradient;
    # unweighted, it is not
    gen = torch.Generator().manual_seed(0)
    model = make_model(gen, 8, 16, 4)
    x, y = torch.randn(20, 8, generator=gen), torch.randint(0, 4, (20,), generator=gen)
    rows = shard_rows(20, 2, 0.6)  # [16, 4]

    def grads(loss: torch.Tensor) -> list[torch.Tensor]:
        return [g.clone() for g in torch.autograd.grad(loss, list(model.parameters()))]

    full = grads(F.cross_entropy(model(x), y))
    per_rank: list[list[torch.Tensor]] = [[], []]
    plain: list[list[torch.Tensor]] = [[], []]
    lo = 0
    for r, n in enumerate(rows):
        xs, ys = x[lo:lo + n], y[lo:lo + n]
        per_rank[r] = grads(F.cross_entropy(model(xs), ys) * (2 * n / 20))
        plain[r] = grads(F.cross_entropy(model(xs), ys))
        lo += n
    for f, a, b in zip(full, *per_rank, strict=True):
        torch.testing.assert_close((a + b) / 2, f)
    assert not all(torch.allclose((a + b) / 2, f) for f, a, b in zip(full, *plain, strict=True))
