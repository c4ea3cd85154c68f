"""tracer's own process holds numpy's OpenBLAS to one thread, and leaves the environment as it found it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

_THREADS = """
import os, sys
{setup}
import numpy
print(len(os.listdir("/proc/self/task")), os.environ.get("OPENBLAS_NUM_THREADS"))
"""


def _threads(setup: str) -> tuple[int, str]:
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    out = subprocess.run([sys.executable, "-c", _THREADS.format(setup=setup)], capture_output=True, text=True,
                         check=True, env=env).stdout.split()
    return int(out[0]), out[1]


def test_numpy_is_imported_with_one_blas_thread_and_the_variable_is_gone_after() -> None:
    threads, variable = _threads("from tracer._blas import quiet_blas; quiet_blas()")
    assert (threads, variable) == (1, "None")


def test_without_it_openblas_would_start_threads_of_its_own() -> None:
    # (what the test above guards against)
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one core: OpenBLAS starts no thread of its own, there is nothing to hold back")
    threads, _ = _threads("")
    assert threads > 1


def test_a_thread_count_the_user_set_is_left_alone() -> None:
    threads, variable = _threads("os.environ['OPENBLAS_NUM_THREADS'] = '2'\n"
                                 "from tracer._blas import quiet_blas; quiet_blas()")
    assert variable == "2"


def test_importing_the_cli_imports_no_numpy() -> None:
    # quiet_blas() in the CLI's main does nothing once numpy is imported: a command module that imported numpy at
    # its top would turn it off unseen
    code = "import sys, tracer.cli; print('numpy' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "False"


@pytest.mark.slow
def test_a_forkserver_imports_numpy_on_one_blas_thread_first() -> None:
    # (the dashboard's workers come from a forkserver: a fresh interpreter that the CLI's import never reached)
    from tracer.job.workers import FORKSERVER_PRELOAD

    assert FORKSERVER_PRELOAD[0] == "tracer.job._preload"
    threads, variable = _threads("import tracer.job._preload")
    assert (threads, variable) == (1, "None")


def test_record_leaves_numpy_as_the_scenario_would_find_it(monkeypatch: pytest.MonkeyPatch) -> None:
    # a scenario recorded in tracer's own process keeps the BLAS threads it would have had
    import tracer.cli as cli

    called: list[bool] = []
    monkeypatch.setattr(cli, "quiet_blas", lambda: called.append(True))
    cli.main(["record", "--help"])
    assert called == []
    cli.main(["summary", "--help"])
    assert called == [True]
