"""How long one rank's timeline takes to write and read back as Parquet with each codec, and how large it is: what
chose snappy for caches (tracer.files.storage.CACHE_COMPRESSION) and zstd for what a user keeps.

The timeline is parsed once from ``TRACE``; each codec is then written with tracer's own settings (dictionaries
on the categorical columns only, statistics on the columns a query filters by) ``--repeat`` times, best kept.

    python bench/parquet_codecs.py /tmp/tracer-bench/job-mlp_train_200_x9-r8/rank-0.json
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace", type=Path)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)
    if not args.trace.is_file():
        ap.error(f"{args.trace}: no such trace")
    import pyarrow as pa
    import pyarrow.parquet as pq

    from tracer.files.storage import STATISTICS_COLUMNS
    from tracer.parsers import load_trace

    timeline = load_trace(args.trace, cache=False)
    table = pa.Table.from_pandas(timeline.events, preserve_index=False)
    categorical = [f.name for f in table.schema if pa.types.is_dictionary(f.type)]
    stats = [c for c in STATISTICS_COLUMNS if c in table.column_names]
    print(f"{args.trace.name}: {len(timeline.events):,} rows; best of {args.repeat}")
    print("| codec | write s | read s | MB |\n| --- | ---: | ---: | ---: |")
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "t.parquet")
        for codec in ("zstd", "lz4", "snappy", "none"):
            write = read = float("inf")
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                pq.write_table(table, out, compression=codec, use_dictionary=categorical, write_statistics=stats)
                t1 = time.perf_counter()
                with pq.ParquetFile(out) as f:
                    f.read()
                write, read = min(write, t1 - t0), min(read, time.perf_counter() - t1)
            print(f"| {codec} | {write:.3f} | {read:.3f} | {os.path.getsize(out) / 1e6:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
