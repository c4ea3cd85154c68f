"""The runs page's filter and sort: typing must not walk the disk or parse traces.

Regression (issue 12): the filter input sends every keystroke (``debounce=False``), and each one rebuilt the
table with ``store.refresh()`` (a scan of the bundled examples, ./runs and every path given) and summarised
any run without one, parsing traces of up to 32 MB — on every keystroke.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

import tracer.dashboard.data as data
from tests.conftest import DATA
from tests.test_dashboard_hostile import DashClient
from tracer.dashboard import ids
from tracer.dashboard.app import create_app
from tracer.dashboard.data import RunStore
from tracer.dashboard.pages import runs

SIDE = DATA / "copy_side_stream.json.gz"


class Counts:
    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.scans = 0
        self.parses = 0
        real_discover, real_parse = data.discover, data.RunStore._parse

        def discover(*args: Any, **kw: Any) -> Any:
            self.scans += 1
            return real_discover(*args, **kw)

        def parse(*args: Any, **kw: Any) -> Any:  # (the store's one way to parse, in a child process or not)
            self.parses += 1
            return real_parse(*args, **kw)

        monkeypatch.setattr(data, "discover", discover)
        monkeypatch.setattr(data.RunStore, "_parse", parse)


def _folder(tmp_path: Path) -> Path:
    """A folder with a trace file and a run directory with a trace but no summary.json (both parsed for the
    table on the page load)."""
    root = tmp_path / "traces"
    run = root / "run-1"
    run.mkdir(parents=True)
    shutil.copy(SIDE, run / "trace.json.gz")
    (run / "meta.json").write_text(json.dumps({"scenario": "compute-copy", "variant": "side-stream"}))
    shutil.copy(SIDE, root / "loose.json.gz")
    return root


def _table_text(resp: Any) -> str:
    assert resp.status_code == 200, resp.get_data(as_text=True)[:500]
    return json.dumps(resp.get_json()["response"][ids.RUNS_TABLE]["children"])


def test_filter_keystrokes_neither_rescan_nor_parse(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = _folder(tmp_path)
    counts = Counts(monkeypatch)
    store = RunStore([root], examples=False, runs_dir=None)
    client = DashClient(create_app(store=store))
    runs.layout(store)  # the page load: scans, and parses what has no summary
    assert counts.scans >= 1 and counts.parses == 2
    # a run appearing meanwhile is not looked for (nor parsed) while typing; the next page load lists it
    shutil.copy(SIDE, root / "late.json.gz")
    counts.scans = counts.parses = 0
    sort = {"col": "date", "desc": True}
    for text in ("sid", "side", "side-s", "side-stream", "compute", "", "loose"):
        shown = _table_text(client.post(ids.RUNS_TABLE, [text, sort, []]))
        assert ("loose" in shown) == (text in ("", "loose")) and ("run-1" in shown) == (text != "loose")
    assert (counts.scans, counts.parses) == (0, 0)
    shown = _table_text(client.post(ids.RUNS_TABLE, ["", {"col": "name", "desc": False}, []]))  # a sort too
    assert "run-1" in shown and "late" not in shown
    assert (counts.scans, counts.parses) == (0, 0)

    runs.layout(store)
    assert counts.scans >= 1 and counts.parses == 1  # only the new trace
    assert "late" in _table_text(client.post(ids.RUNS_TABLE, ["", sort, []]))


def test_table_rows_without_rescan_uses_the_runs_and_summaries_known(tmp_path: Path, monkeypatch) -> None:
    root = _folder(tmp_path)
    counts = Counts(monkeypatch)
    store = RunStore([root], examples=False, runs_dir=None)
    assert counts.scans >= 1 and counts.parses == 0  # registering reads meta.json and summary.json only
    rows = runs.table_rows(store, rescan=False)  # nothing summarised yet: rows without figures, no parse
    assert {r["name"] for r in rows} == {"run-1", "loose"} and all(r["span_ms"] is None for r in rows)
    assert counts.parses == 0
    full = runs.table_rows(store)
    assert counts.parses == 2 and all(r["span_ms"] for r in full)
    assert runs.table_rows(store, rescan=False) == full
