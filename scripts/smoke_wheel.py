"""Smoke-run an installed tracer wheel the way a user would: ``python scripts/smoke_wheel.py WHEEL``.

Run by scripts/check_wheel.sh with the fresh environment's Python, from a temporary directory, so nothing can be
imported from the checkout. Checks the wheel's layout (one top-level package, the package data), then runs
``tracer scenarios``, ``tracer summary`` and ``tracer export`` on a bundled example, and asks the dashboard app
for ``/``. Prints one line per check; a failed check is one line on stderr and exit code 1.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

#: A bundled torch.profiler run: 50 kernels, 50 device-to-host copies, 98% of the copy time hidden.
EXAMPLE = "compute-copy-side-stream-streams-20261202-161322"

#: Package data a missing rule in pyproject.toml would leave out (one file stands for each rule).
PACKAGE_DATA = (
    f"tracer/examples/{EXAMPLE}/trace.json.gz",
    "tracer/examples/README.md",
    "tracer/record/_bootstrap/sitecustomize.py",
    "tracer/dashboard/assets/style.css",
    "tracer/dashboard/pages/runs.py",
    "tracer/scenarios/__main__.py",
)


class SmokeError(Exception):
    """A check that failed; its message is the one line printed."""


def check_layout(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    top = {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")}
    if top != {"tracer"}:
        raise SmokeError(f"{wheel.name}: top-level names {sorted(top)}, want only tracer")
    missing = [name for name in PACKAGE_DATA if name not in names]
    if missing:
        raise SmokeError(f"{wheel.name}: missing {', '.join(missing)}")
    print(f"smoke: layout ok ({len(names)} files, top level: tracer)")


def check_installed() -> Path:
    """The installed package's folder, after checking it is this environment's and not the checkout's."""
    import tracer.dashboard  # binds tracer too
    import tracer.scenarios

    pkg = Path(tracer.__file__).resolve().parent
    if not pkg.is_relative_to(Path(sys.prefix).resolve()):
        raise SmokeError(f"tracer imported from {pkg}, not from the environment at {sys.prefix}")
    for sub in (tracer.dashboard, tracer.scenarios):
        if Path(sub.__file__ or "").resolve().parent.parent != pkg:
            raise SmokeError(f"{sub.__name__} imported from {sub.__file__}, not from inside {pkg}")
    print(f"smoke: import ok ({pkg})")
    return pkg


def tracer_cli(*args: str, cwd: Path) -> str:
    """Run the installed console script; its stdout, or a SmokeError with the last line it wrote on stderr."""
    exe = Path(sys.executable).with_name("tracer")
    proc = subprocess.run([str(exe), *args], cwd=cwd, capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["(nothing on stderr)"])[-1]
        raise SmokeError(f"tracer {' '.join(args)}: exit {proc.returncode}: {last}")
    return proc.stdout


def expect(text: str, want: str, what: str) -> None:
    if want not in text:
        raise SmokeError(f"{what}: {want!r} not in its output:\n{text}")


def check_cli(pkg: Path, work: Path) -> None:
    import tracer

    expect(tracer_cli("--version", cwd=work), f"tracer {tracer.__version__}", "tracer --version")
    expect(tracer_cli("scenarios", cwd=work), "compute-copy", "tracer scenarios")
    print("smoke: tracer --version, tracer scenarios ok")
    example = pkg / "examples" / EXAMPLE
    # The per-GPU row of the README's tour: 50 kernels, 50 copies, 98.0% of the copy time hidden
    summary = tracer_cli("summary", str(example), cwd=work)
    expect(summary, "98.0%", "tracer summary")
    print("smoke: tracer summary ok (copy hidden 98.0%)")
    out = work / "export.sqlite"
    tracer_cli("export", str(example), "-o", str(out), cwd=work)
    with sqlite3.connect(out) as db:
        kernels = db.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
        copies = db.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY").fetchone()[0]
    if (kernels, copies) != (50, 50):
        raise SmokeError(f"tracer export: {kernels} kernels and {copies} copies in {out.name}, want 50 and 50")
    print("smoke: tracer export ok (50 kernels, 50 copies)")


def check_dashboard(work: Path) -> None:
    from tracer.dashboard import create_app

    app = create_app(examples=True, runs_dir=work / "runs")
    client = app.server.test_client()
    for path, want in (("/", "<title>tracer</title>"), ("/assets/style.css", "")):
        resp = client.get(path)
        if resp.status_code != 200 or want not in resp.get_data(as_text=True):
            raise SmokeError(f"dashboard: GET {path} answered {resp.status_code}")
    runs = app.tracer_store.runs()
    if not any(run.name == EXAMPLE for run in runs):
        raise SmokeError(f"dashboard: the bundled example {EXAMPLE} is not among its {len(runs)} runs")
    print(f"smoke: dashboard ok (GET / 200, assets served, {len(runs)} bundled runs)")


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python scripts/smoke_wheel.py WHEEL", file=sys.stderr)
        return 2
    try:
        check_layout(Path(argv[0]))
        pkg = check_installed()
        with tempfile.TemporaryDirectory(prefix="tracer-smoke-") as tmp:
            check_cli(pkg, Path(tmp))
            check_dashboard(Path(tmp))
    except SmokeError as exc:
        print(f"smoke: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
