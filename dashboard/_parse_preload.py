"""Imported first by the forkserver that the dashboard's parses are forked from (:mod:`tracer.dashboard.parsing`):
numpy with OpenBLAS on one thread (:func:`tracer._blas.quiet_blas`: the forkserver is a fresh interpreter), then what
every parse runs, so that each child starts with it imported; then one small bundled trace parsed, laid out and
summarised, so that what the first call of each step sets up (caches, lazy imports: ~25 ms on a small trace) is
set up once, not in every child."""

from tracer._blas import quiet_blas

quiet_blas()

import contextlib  # noqa: E402
import io  # noqa: E402
from pathlib import Path  # noqa: E402

import tracer  # noqa: E402
import tracer.files.storage  # noqa: E402, F401 - imported for the children
import tracer.parsers.kineto  # noqa: E402, F401
import tracer.parsers.nsys  # noqa: E402, F401
import tracer.parsers.parquet  # noqa: E402, F401
from tracer.dashboard.model import prepare  # noqa: E402
from tracer.dashboard.parsing import summary_of  # noqa: E402
from tracer.parsers.load import load_trace  # noqa: E402


def _warm_up() -> None:
    """Parse, lay out and summarise a bundled example's trace, saying nothing; nothing where there is none."""
    examples = Path(tracer.__file__).parent / "examples"
    for trace in sorted(examples.glob("compute-copy-side-stream-*/trace.json.gz"))[:1]:
        try:
            with contextlib.redirect_stderr(io.StringIO()):
                timeline = load_trace(trace, cache=False)
                prepare(timeline)
                summary_of(timeline)
        except Exception:  # noqa: BLE001 - a head start only: a parse that needs it says what is wrong
            pass


_warm_up()
