"""Fuzz: seeded mutations of the real traces in tests/data, each a correct parse or a one-line refusal.

The engine and the verdicts are in tests/fuzzing.py. CI runs a fixed set of cases (the same every run): every
mutation of every input class three times, each on a source and with a seed drawn from a seeded generator, 87
cases (fuzzing.covering_cases). ``TRACER_FUZZ_CASES=N`` runs N cases of the campaign's schedule instead
(fuzzing.cases: 180 is the fewest that reaches every Kineto mutation there), and ``python bench/fuzz.py`` runs
the long campaign whose figures docs/reliability.md records.
"""

from __future__ import annotations

import os
from collections import Counter

import fuzzing  # tests/fuzzing.py (pytest puts tests/ on sys.path)
import pytest

SEED = int(os.environ.get("TRACER_FUZZ_SEED", "0"))
#: each (class, mutation) this many times in CI's set: 3 × 29 = 87 cases
ROUNDS = 3
CHOSEN = (list(fuzzing.cases(int(os.environ["TRACER_FUZZ_CASES"]), SEED)) if "TRACER_FUZZ_CASES" in os.environ
          else list(fuzzing.covering_cases(ROUNDS, SEED)))
CASES = len(CHOSEN)
#: Growth of a child's peak RSS over its parent's at fork. The inputs are at most a few MB; a summary of one
#: needs tens of MB. More means something inflates or loops.
MAX_GROWTH_MB = 300


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    return fuzzing.run_cases(CHOSEN, tmp_path_factory.mktemp("fuzz"))


@pytest.mark.slow
def test_every_mutated_trace_is_a_correct_parse_or_a_one_line_refusal(outcomes):
    defects = [f"{o.case.label}: {o.verdict} | {o.stderr.strip().splitlines()[-1:] if o.stderr else ''}"
               for o in outcomes if o.defect]
    assert not defects, f"{len(defects)} of {len(outcomes)} cases:\n" + "\n".join(defects[:30])


@pytest.mark.slow
def test_every_class_and_mutation_was_exercised(outcomes):
    # a suite that quietly stopped building inputs (a renamed fixture, a mutation that always raises in the
    # builder) would pass the test above with nothing tried
    assert len(outcomes) == CASES
    tried = Counter((o.case.klass, o.case.mutation) for o in outcomes)
    expected = ({("kineto", m) for m in fuzzing.KINETO_MUTATIONS} | {("nsys", m) for m in fuzzing.NSYS_MUTATIONS}
                | {("run-dir", m) for m in fuzzing.RUN_DIR_MUTATIONS})
    assert set(tried) == expected
    verdicts = Counter(o.verdict for o in outcomes)
    assert verdicts["parsed"] > CASES // 10 and verdicts["refused"] > CASES // 10, verdicts


def test_no_input_needs_much_memory_or_time(outcomes):
    worst = max(outcomes, key=lambda o: o.rss_growth_mb)
    assert worst.rss_growth_mb < MAX_GROWTH_MB, worst.case.label
    slow = max(outcomes, key=lambda o: o.seconds)
    assert slow.seconds < 30, slow.case.label


def test_figure_preserving_mutations_were_compared(outcomes):
    same = [o for o in outcomes if o.case.mutation.startswith("same:")]
    assert same and all(o.verdict == "parsed" for o in same), [o.case.label for o in same if o.verdict != "parsed"]
