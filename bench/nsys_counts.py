"""Does `tracer record --backend nsys` count what plain `nsys profile` counts? (issue 39, point 3)

    python3 bench/nsys_counts.py --out DIR [--repeat 2] -- python3 bench/user_train.py --steps 100 --workers 0

Runs the command under three captures, ``--repeat`` times each, interleaved:

    plain    ``nsys profile`` with nsys' own defaults
    args     ``nsys profile`` with the arguments tracer passes (tracer.record.nsys.NSYS_COMMAND_ARGS)
    tracer   ``python3 -m tracer record --backend nsys -- COMMAND``

and reads each SQLite export: kernels (count, summed ns) as the export has them and as tracer's parser reads them,
copies and memsets (count), and whether the capture's output mentions a CUPTI error. Then, per kernel name, where
a capture's count differs from the first ``plain`` one. Needs nsys on PATH (the GPU machine); prints one
line and exits 2 without it.
"""

from __future__ import annotations

import argparse
import gzip
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tracer.parsers import load_trace  # noqa: E402
from tracer.record.nsys import NSYS_COMMAND_ARGS  # noqa: E402


def _sqlite_of(report: Path) -> Path:
    out = report.with_suffix(".sqlite")
    subprocess.run(["nsys", "export", "--type", "sqlite", "--force-overwrite=true", "-o", str(out), str(report)],
                   check=True, capture_output=True)
    return out


def _counts(sqlite: Path) -> dict[str, Any]:
    if sqlite.suffix == ".gz":
        plain = Path(tempfile.mkdtemp()) / "x.sqlite"
        with gzip.open(sqlite, "rb") as f, plain.open("wb") as g:
            shutil.copyfileobj(f, g)
        sqlite = plain
    con = sqlite3.connect(sqlite)
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    names: Counter[str] = Counter()
    kernel_ns = 0
    if "CUPTI_ACTIVITY_KIND_KERNEL" in tables:
        for name, n, ns in con.execute(
            "SELECT s.value, count(*), sum(k.end - k.start) FROM CUPTI_ACTIVITY_KIND_KERNEL k "
            "JOIN StringIds s ON s.id = k.shortName GROUP BY s.value"
        ):
            names[name] = n
            kernel_ns += ns

    def count(table: str) -> int:
        return con.execute(f"SELECT count(*) FROM {table}").fetchone()[0] if table in tables else 0

    parsed = load_trace(sqlite, cache=False).events
    kernels = parsed[parsed["kind"] == "kernel"]
    result = {"kernels": sum(names.values()), "kernel_ms": kernel_ns / 1e6, "parsed": len(kernels),
              "parsed_ms": float((kernels["end_ns"] - kernels["start_ns"]).sum()) / 1e6,
              "memcpy": count("CUPTI_ACTIVITY_KIND_MEMCPY"), "memset": count("CUPTI_ACTIVITY_KIND_MEMSET"),
              "runtime": count("CUPTI_ACTIVITY_KIND_RUNTIME"), "by_name": names, "tables": sorted(tables)}
    con.close()
    return result


def _capture(kind: str, command: list[str], out: Path, tag: str) -> tuple[Path, str]:
    if kind == "plain":
        cmd = ["nsys", "profile", "--force-overwrite=true", "-o", str(out / tag), *command]
    elif kind == "args":
        cmd = ["nsys", *NSYS_COMMAND_ARGS, "-o", str(out / tag), *command]
    else:
        cmd = [sys.executable, "-m", "tracer", "record", "--backend", "nsys", "--out", str(out / "runs"),
               "--name", tag, "--", *command]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    log = proc.stdout + proc.stderr
    (out / f"{tag}.log").write_text(log)
    if proc.returncode != 0:
        print(f"{tag}: exit {proc.returncode}\n{log[-2000:]}", file=sys.stderr)
    if kind == "tracer":
        run = out / "runs" / tag
        found = sorted(run.glob("*.sqlite*"))
        return found[0], log
    return _sqlite_of(out / f"{tag}.nsys-rep"), log


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("command", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if shutil.which("nsys") is None:
        print("nsys_counts: no nsys on PATH; run this on the GPU machine", file=sys.stderr)
        sys.exit(2)
    args.out.mkdir(parents=True, exist_ok=True)
    rows: list[tuple[str, dict[str, Any], bool]] = []
    for i in range(args.repeat):
        for kind in ("plain", "args", "tracer"):
            sqlite, log = _capture(kind, command, args.out, f"{kind}{i}")
            rows.append((f"{kind}{i}", _counts(sqlite), "CUPTI_ERROR" in log))
    print(f"{'capture':<10} {'kernels':>8} {'kernel ms':>10} {'parsed':>7} {'parsed ms':>10} {'memcpy':>7} "
          f"{'memset':>7} {'runtime':>8}  cupti error")
    for tag, c, err in rows:
        print(f"{tag:<10} {c['kernels']:>8} {c['kernel_ms']:>10.2f} {c['parsed']:>7} {c['parsed_ms']:>10.2f} "
              f"{c['memcpy']:>7} {c['memset']:>7} {c['runtime']:>8}  {'yes' if err else 'no'}")
    base_tag, base, _ = rows[0]
    for tag, c, _ in rows[1:]:
        diff = {n: c["by_name"][n] - base["by_name"][n] for n in set(c["by_name"]) | set(base["by_name"])
                if c["by_name"][n] != base["by_name"][n]}
        print(f"\n{tag} vs {base_tag}: {len(diff)} kernel names differ")
        for name, d in sorted(diff.items(), key=lambda kv: -abs(kv[1]))[:15]:
            print(f"  {d:+5d}  {name[:110]}")
    print("\ntables only in tracer0:", sorted(set(rows[2][1]["tables"]) - set(base["tables"])))


if __name__ == "__main__":
    main()
