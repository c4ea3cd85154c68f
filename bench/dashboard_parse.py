"""What parsing in a child process costs the dashboard (issue 38.1): an upload, and a run on disk opened in the
page, parsed in the server's own process (``RunStore(isolate=False)``, as before) and in a child under the
limits (``isolate=True``, now), alternately, in one run.

    .venv/bin/python bench/dashboard_parse.py [--repeat 9] [TRACE ...]

Prints, per trace and path, the median and the fastest of ``--repeat`` times in each mode, and the first parse
of a fresh process (which starts the forkserver) apart; then the server process's resident memory after
uploading each trace ``--repeat`` times in each mode (a fresh process each).
"""

from __future__ import annotations

import argparse
import base64
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT = [ROOT / "tests" / "data" / "copy_side_stream.json.gz", ROOT / "tests" / "data" / "mlp_train_200.json.gz"]

#: One fresh process: the first parse in each mode, then the server's RSS after repeated uploads.
_FRESH = r"""
import base64, json, sys, time, tempfile
from pathlib import Path
from tracer.dashboard.data import RunStore

def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024

if __name__ == "__main__":
    trace, isolate, repeat = Path(sys.argv[1]), sys.argv[2] == "1", int(sys.argv[3])
    url = "data:application/octet-stream;base64," + base64.b64encode(trace.read_bytes()).decode()
    with tempfile.TemporaryDirectory() as tmp:
        store = RunStore([], examples=False, runs_dir=None, upload_dir=Path(tmp), isolate=isolate,
                         max_uploads=1)
        before = rss()
        t = time.perf_counter()
        store.add_upload(trace.name, url)
        first = time.perf_counter() - t
        for _ in range(repeat - 1):
            store.add_upload(trace.name, url)
        after = rss()
        store.close()
    print(json.dumps({"first_s": first, "rss_before": before, "rss_after": after}))
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("traces", nargs="*", type=Path, default=DEFAULT)
    ap.add_argument("--repeat", type=int, default=9)
    args = ap.parse_args()

    from tracer.dashboard.data import RunStore

    print(
        "| trace | path | in the server's process: median (fastest) | in a child: median (fastest) "
        "| difference of the medians |"
    )
    print("| --- | --- | --: | --: | --: |")
    with tempfile.TemporaryDirectory() as tmp:
        stores = {
            isolate: RunStore([], examples=False, runs_dir=None, upload_dir=Path(tmp) / str(isolate), isolate=isolate)
            for isolate in (False, True)
        }
        for trace in args.traces:
            url = "data:application/octet-stream;base64," + base64.b64encode(trace.read_bytes()).decode()
            stores[True].add_upload(trace.name, url)  # (the forkserver started, the imports warm, in both modes)
            stores[False].add_upload(trace.name, url)
            times: dict[tuple[str, bool], list[float]] = {}
            for _ in range(args.repeat):
                for isolate in (False, True):  # alternately: drift within a pair favours neither
                    store = stores[isolate]
                    t = time.perf_counter()
                    store.add_upload(trace.name, url)
                    times.setdefault(("upload", isolate), []).append(time.perf_counter() - t)
                    on_disk = RunStore(
                        [trace], examples=False, runs_dir=None, isolate=isolate, parse_limits=store.parse_limits
                    )
                    key = on_disk.runs()[0].key
                    t = time.perf_counter()
                    on_disk.view(key)
                    times.setdefault(("run opened", isolate), []).append(time.perf_counter() - t)
            for path in ("upload", "run opened"):
                a, b = times[(path, False)], times[(path, True)]
                print(
                    f"| {trace.name} | {path} | {statistics.median(a) * 1e3:.0f} ms ({min(a) * 1e3:.0f}) | "
                    f"{statistics.median(b) * 1e3:.0f} ms ({min(b) * 1e3:.0f}) | "
                    f"{(statistics.median(b) - statistics.median(a)) * 1e3:+.0f} ms |"
                )
        for store in stores.values():
            store.close()

    print()
    print(f"| trace | mode | first upload of a fresh server | server RSS before → after {args.repeat} uploads |")
    print("| --- | --- | --: | --: |")
    for trace in args.traces:
        for isolate in (False, True):
            out = subprocess.run(
                [sys.executable, "-c", _FRESH, str(trace), str(int(isolate)), str(args.repeat)],
                capture_output=True,
                text=True,
                check=True,
                cwd=ROOT,
            )
            r = json.loads(out.stdout.splitlines()[-1])
            print(
                f"| {trace.name} | {'child' if isolate else 'in process'} | {r['first_s'] * 1e3:.0f} ms | "
                f"{r['rss_before'] / 1e6:.0f} → {r['rss_after'] / 1e6:.0f} MB |"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
