"""tracer's start-up hook: on PYTHONPATH only under ``tracer record -- COMMAND`` (see tracer/record/capture.py).

Python imports the first ``sitecustomize`` it finds on sys.path at start-up; this one starts tracer's capture
when TRACER_CAPTURE_DIR is set, then runs the ``sitecustomize`` this one shadows (a distribution's or a
virtual environment's), so that nothing the process had before is lost.
"""

# (annotations unevaluated: this file runs in whatever Python the user's command starts, however old)
from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Callable


def _start_capture() -> None:
    if not os.environ.get("TRACER_CAPTURE_DIR"):
        return
    try:
        try:
            install = _capture_install()
        except ImportError:
            # tracer is not installed for this Python: its location goes last on sys.path, so that it shadows
            # nothing of the program's own
            home = os.environ.get("TRACER_CAPTURE_HOME")
            if not home:
                raise
            sys.path.append(home)
            install = _capture_install()  # (again, from tracer's own location)
    except Exception as exc:  # noqa: BLE001 - another interpreter than tracer's: say so, run the program anyway
        sys.stderr.write(f"tracer: warning: {sys.executable} cannot import tracer ({exc}); pid {os.getpid()} "
                         "is not recorded\n")
        return
    install()


def _capture_install() -> Callable[[], None]:
    # (here: only when capture is on, and tracer may not be importable as the program's Python stands)
    from tracer.record.capture import install

    return install


def _run_shadowed() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


_start_capture()
_run_shadowed()
