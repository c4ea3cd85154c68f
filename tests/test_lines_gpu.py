"""Issue 37's "done when" on a real recording: tests/data/planted_train.py (its planted slow-downs on known lines)
recorded on an NVIDIA H100 with ``tracer record --stacks -- python3 planted_train.py`` (torch 2.11.0+cu130; the
trace is tests/data/planted_h100.json.gz). ``tracer explain`` must give each planted line as the source of a finding
of the right kind, with the fix that fits the call, and ``tracer lines`` must rank the lines by what they cost."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tracer.analysis.source_code import SourceFiles
from tracer.explain import Explanation, explain, explain_lines
from tracer.explain.lines import LOOP_FIX, read_sources
from tracer.parsers import load_trace
from tracer.timeline import Timeline

DATA = Path(__file__).parent / "data"
TRACE = DATA / "planted_h100.json.gz"
SCRIPT = "planted_train.py"

#: line → (a finding kind it must have, the call its fix is written for)
EXPECTED = {
    28: ("host_sync", "torch.cuda.synchronize()"),
    29: ("pageable", ".to(...) from pageable memory"),
    31: ("launch_bound", LOOP_FIX.call),
    33: ("pageable", ".cpu()"),
    34: ("host_sync", ".item()"),
}


@pytest.fixture(scope="module")
def timeline() -> Timeline:
    return load_trace(TRACE, cache=False)


@pytest.fixture(scope="module")
def explained(timeline: Timeline) -> Explanation:
    return explain(timeline, sources=read_sources(timeline, files=SourceFiles([DATA])))


def test_the_expected_lines_are_the_scripts_planted_ones() -> None:
    tree = ast.parse((DATA / SCRIPT).read_text())
    planted = ast.literal_eval(next(n.value for n in tree.body if isinstance(n, ast.Assign)
                                    and getattr(n.targets[0], "id", "") == "PLANTED"))
    assert set(planted) == set(EXPECTED)


def assert_planted_findings(explained: Explanation) -> None:
    """Each planted line of :data:`EXPECTED` is the source of one finding group of its kind, with the fix written
    for its call, in ``step`` (also tests/test_lines_nsys.py's check of the same script recorded under nsys)."""
    by = explained.by_line()
    ours = by[by["file"].str.endswith(SCRIPT)]  # (nsys names the script by its absolute path)
    for line, (kind, call) in EXPECTED.items():
        row = ours[ours["line"] == line]
        assert len(row) == 1, (line, ours["line"].tolist())
        kinds = {k["kind"] for k in row["kinds"].item()}
        assert kind in kinds, (line, kinds)
        assert row["call"].item() == call, (line, row["call"].item())
        assert row["function"].item() == "step" and row["exact"].item(), line


@pytest.mark.slow  # (explain of a 1 s GPU recording: a few seconds)
def test_each_planted_line_is_the_source_of_a_finding_of_its_kind_with_its_fix(explained: Explanation) -> None:
    assert_planted_findings(explained)


@pytest.mark.slow
def test_the_lines_table_ranks_the_large_cpu_copy_first(timeline: Timeline) -> None:
    table = explain_lines(timeline, read_sources(timeline, files=SourceFiles([DATA]))).table
    ours = table[table["file"] == SCRIPT].set_index("line")
    assert ours.index[0] == 33  # host_copy = big.cpu(): 64 MB a step to pageable memory, most of the GPU time
    assert ours.loc[33, "exposed_copy_ns"] > 0.5 * ours["gpu_ns"].sum()
    assert ours.loc[29, "exposed_copy_ns"] > 0  # the pageable host-to-device copy, beside no compute
    assert ours.loc[28, "sync_ns"] == ours["sync_ns"].max() or ours.loc[33, "sync_ns"] == ours["sync_ns"].max()
    assert ours.loc[28, "sync_ns"] > 0 and ours.loc[34, "sync_ns"] > 0  # the synchronize() and the .item() waited
    assert ours.loc[31, "gpu_ns"] > 0  # the loop's tiny kernels
