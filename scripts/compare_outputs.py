"""Every output tracer makes of the bundled runs and the test traces, fingerprinted, to show that a change which
should change no behaviour (a move of modules, a refactor) left every byte as it was.

    .venv/bin/python scripts/compare_outputs.py save /tmp/before.json     # on the old code
    .venv/bin/python scripts/compare_outputs.py check /tmp/before.json    # on the new code: exit 1 on any change

What is run, in this process through the CLI (Typer's test runner, a fixed terminal width): ``summary`` (text and
``--json``), ``explain --json``, ``sql`` and ``export`` to every format (the SHA-256 of the file's content, its time
of export left out) of each bundled run and each trace under tests/data; ``diff`` of neighbouring bundled runs;
``summary --job`` and ``explain`` of the test jobs; ``summary`` of the examples' folder. The inputs are copied first
into one fixed folder (``--work``), so the paths that outputs name are the same on both sides and no cache is
written into the checkout. A command's exit code and its stdout and stderr together are kept whole, so ``check``
prints the first lines that differ.
"""

from __future__ import annotations

import argparse
import difflib
import gzip
import hashlib
import json
import os
import re
import shutil
import sqlite3
import sys
import tempfile
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: inputs: every bundled run, every trace file of the test data, and the folders that hold a job's ranks
EXAMPLES = ROOT / "tracer" / "examples"
DATA = ROOT / "tests" / "data"
TRACE_SUFFIXES = (".json.gz", ".sqlite.gz", ".sqlite", ".json")
EXPORT_SUFFIXES = (".json.gz", ".sqlite", ".nvtxt", ".parquet")
SQL = "SELECT kind, count(*) AS n, sum(dur_ns) AS ns FROM events GROUP BY 1 ORDER BY 1"


def _inputs(work: Path) -> tuple[list[Path], list[Path]]:
    """Copy the inputs into ``work``; return (the runs and traces, the bundled runs in order)."""
    if work.exists():
        shutil.rmtree(work)
    shutil.copytree(EXAMPLES, work / "examples", ignore=shutil.ignore_patterns("*.md"))
    shutil.copytree(DATA, work / "data", ignore=shutil.ignore_patterns("*.py", "*.md", "*.txt"))
    runs = sorted(p for p in (work / "examples").iterdir() if p.is_dir())
    traces = sorted(p for p in (work / "data").rglob("*") if p.is_file() and p.name.endswith(TRACE_SUFFIXES))
    return runs + traces, runs


def _commands(work: Path) -> Iterator[tuple[str, list[str], Path | None]]:
    """(key, CLI arguments, a file the command writes or None)."""
    items, runs = _inputs(work)
    out = work / "out"
    out.mkdir()
    for i, item in enumerate(items):
        name = str(item.relative_to(work))
        yield f"summary {name}", ["summary", str(item)], None
        yield f"summary --json {name}", ["summary", str(item), "--json"], None
        yield f"explain --json {name}", ["explain", str(item), "--json"], None
        yield f"sql {name}", ["sql", str(item), SQL], None
        for suffix in EXPORT_SUFFIXES:
            target = out / f"{i}{suffix}"
            yield f"export {suffix} {name}", ["export", str(item), "-o", str(target)], target
    for a, b in zip(runs, runs[1:]):
        yield f"diff {a.name} {b.name}", ["diff", str(a), str(b)], None
    yield "summary examples", ["summary", str(work / "examples")], None
    for job in (work / "data" / "comm", work / "data" / "external" / "HTA_trace_compare"):
        if job.is_dir():
            name = str(job.relative_to(work))
            yield f"summary --job {name}", ["summary", "--job", str(job)], None
            yield f"summary --job --json {name}", ["summary", "--job", str(job), "--json"], None
            yield f"explain --json {name}", ["explain", str(job), "--json"], None


#: the time of export that an nsys SQLite file records (its only bytes that differ between two equal exports)
_STAMP = re.compile(rb"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d")


def _digest(path: Path) -> str:
    """SHA-256 of what a written file holds: a gzip file's content (its header has a time), an SQLite file's SQL
    dump with time stamps masked."""
    if path.suffix == ".gz":
        data = gzip.decompress(path.read_bytes())
    elif path.suffix == ".sqlite":
        with closing(sqlite3.connect(path)) as db:
            data = _STAMP.sub(b"<time>", "\n".join(db.iterdump()).encode())
    else:
        data = path.read_bytes()
    return hashlib.sha256(data).hexdigest()


def fingerprint(work: Path) -> dict[str, str]:
    """Every command's exit code and output (and the SHA-256 of the file it wrote), by key."""
    os.environ["COLUMNS"] = "160"
    os.environ["TERM"] = "dumb"
    from typer.testing import CliRunner

    from tracer.cli import app

    runner = CliRunner()
    results: dict[str, str] = {}
    for key, args, written in _commands(work):
        r = runner.invoke(app, args)
        text = f"exit {r.exit_code}\n{r.output}"
        if r.exception is not None and not isinstance(r.exception, SystemExit):
            text += f"\nexception {type(r.exception).__name__}: {r.exception}"
        if written is not None and written.exists():
            text += f"\nsha256 {_digest(written)}"
        results[key] = text
        print(f"{len(results):4d} {key}: exit {r.exit_code}", file=sys.stderr)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=["save", "check"])
    parser.add_argument("manifest", type=Path, help="the fingerprints' JSON file (written by save, read by check)")
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "tracer-compare-outputs",
                        help="where the inputs are copied and the outputs written (emptied first)")
    args = parser.parse_args()
    now = fingerprint(args.work)
    if args.action == "save":
        args.manifest.write_text(json.dumps(now, indent=0, sort_keys=True))
        print(f"saved {len(now)} outputs to {args.manifest}")
        return 0
    before: dict[str, str] = json.loads(args.manifest.read_text())
    changed = [k for k in sorted(before.keys() | now.keys()) if before.get(k) != now.get(k)]
    for key in changed:
        print(f"--- changed: {key}")
        diff = difflib.unified_diff(before.get(key, "(absent)").splitlines(), now.get(key, "(absent)").splitlines(),
                                    lineterm="", n=1)
        print("\n".join(list(diff)[2:22]))
    print(f"{len(now) - len(changed)} of {len(before.keys() | now.keys())} outputs identical; {len(changed)} changed")
    return 1 if changed else 0


if __name__ == "__main__":
    sys.exit(main())
