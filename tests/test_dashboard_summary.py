"""The dashboard reads the summary `tracer summary` prints (issue 12): one shape, less what is computed on demand
(ranges, launches); and the recorder's plain report reads the same typed per-GPU figures."""

from __future__ import annotations

import gc
import weakref
from dataclasses import replace
from pathlib import Path

import orjson
import pytest

from tracer.analysis import registry
from tracer.analysis.summary import Summary, summarize
from tracer.dashboard.data import RunInfo
from tracer.dashboard.figures import fmt_duration
from tracer.dashboard.model import prepare
from tracer.dashboard.pages import common, runs
from tracer.dashboard.parsing import summary_of
from tracer.parsers import load_trace
from tracer.record.scenario import plain_report
from tracer.timeline import Timeline, concat

DATA = Path(__file__).parent / "data"
PAIR = DATA / "pair_kineto.json.gz"


def _text(component) -> str:
    def walk(c) -> str:
        if c is None:
            return ""
        if isinstance(c, (str, int, float)):
            return str(c)
        if isinstance(c, (list, tuple)):
            return " ".join(walk(x) for x in c)
        return walk(getattr(c, "children", None))

    return " ".join(walk(component).split())


def test_the_dashboard_summary_is_the_cli_s_without_what_is_computed_on_demand():
    t = load_trace(PAIR, cache=False)
    s = summary_of(t)
    full = summarize(t)
    # the runs table pays for neither ranges nor launches; everything else is the CLI's, key for key
    lazy = {registry.owner_of(k).name for k in full.keys() - s.keys()}
    assert lazy == {a.name for a in registry.analyses() if a.lazy} == {"ranges", "launches"}
    assert s == {k: v for k, v in full.items() if k in s} and s["devices"] == full["devices"]
    row = runs.run_row(RunInfo("k", PAIR, "pair", "file", {}, s), s)
    assert row["hidden_pct"] == 100.0 * full["devices"]["0"]["overlap_ns"] / full["devices"]["0"]["copy_ns"]


def test_the_dashboard_summary_is_plain_data_that_keeps_no_timeline():
    # (it crosses from the parse's child process to the server, and outlives the view the cache lets go)
    t = load_trace(PAIR, cache=False)
    s = summary_of(t)
    ref = weakref.ref(t)
    del t
    gc.collect()
    assert ref() is None and orjson.loads(orjson.dumps(s)) == s


def test_cards_of_a_job_name_the_rank():
    view = prepare(load_trace(PAIR, cache=False))  # (a job's layout is the dashboard model's: another change)
    (card,) = common.device_cards(view)
    assert "GPU 0" in _text(card) and "rank" not in _text(card)
    (d,) = view.devices
    text = _text(common.device_card(replace(d, rank=1), multi_rank=True))
    assert text.startswith("rank 1 · GPU 0")
    assert f"{100 * d.copy_hidden_frac:.0f}% of copy time hidden" in text


def test_host_cards_read_the_summary_s_threads():
    t = load_trace(DATA / "mlp_train_200.json.gz", cache=False)
    host = t.events[t.events["device"] < 0].reset_index(drop=True)
    cpu = Timeline(host, t.meta)
    view = prepare(cpu)
    threads = summarize(cpu)["threads"]
    text = _text(common.host_cards(view))
    for th in threads:
        assert f"pid {th['pid']}" in text and f"{th['ops']:,} framework ops" in text


def test_plain_report_reads_the_typed_per_gpu_figures():
    t = load_trace(PAIR, cache=False)
    meta = {"scenario": "pair", "variant": "all", "mode": "streams", "devices": ["cuda:0"], "backend": "torch",
            "wall_times_s": {"run": 0.001}, "checks": {}}
    doc = summarize(t)
    text = plain_report(meta, doc, "runs/x")
    assert plain_report(meta, Summary.from_dict(doc), "runs/x") == text
    d = doc["devices"]["0"]
    hidden = f"{100 * d['overlap_ns'] / d['copy_ns']:.1f}%"
    assert f"GPU 0: {d['kernels']} kernels, {d['memcpys']} copies; " in text and f"({hidden} of copy hidden)" in text
    job = summarize(concat([t, t], ranks=[0, 1]))
    report = plain_report(meta, job, "runs/x")
    assert "GPU 0/0: " in report and "GPU 1/0: " in report


@pytest.mark.slow
def test_a_gpu_card_says_how_far_the_host_ran_ahead_with_the_summary_s_launch_figures():
    t = load_trace(DATA / "mlp_train_200.json.gz", cache=False)
    (card,) = common.device_cards(prepare(t))
    (x,) = summarize(t)["launches"].values()
    text = _text(card)
    # the figures in words: what the delay is, and what the queue's state says (this run: the GPU waited)
    assert (f"Work started {fmt_duration(x['delay_p50_ns'])} after its launch call returned (median; 95th percentile "
            f"{fmt_duration(x['delay_p95_ns'])})" in text
            and f"the stream's queue was empty at {100 * x['empty_at_launch'] / x['launches']:.0f}% of launches: the "
                "GPU often waited for the host to launch" in text)
    (d,) = prepare(t).devices
    assert "Launches:" not in _text(common.device_card(d))  # (no launch figures: no line)
