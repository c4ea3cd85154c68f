"""Communication as its own work: classification (metadata first, names second, a kernel's host record third),
per-GPU compute / comm / overlap / exposed, collectives matched across ranks, skew, stragglers, clock bounds.

Real traces (HTA's NCCL ranks, its NCCL-metadata trace, TraceLens' ROCm MI300 trace with RCCL kernels) are checked
against an independent computation written here: the JSON read by Python's json with Decimal times, unions of
intervals in plain numpy.
"""

from __future__ import annotations

import gzip
import json
import re
from decimal import ROUND_HALF_EVEN, Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tracer.analysis.comm import bus_factor, collectives, device_comm, shift_ranks
from tracer.analysis.summary import analyze
from tracer.cli import main
from tracer.files.storage import write_timeline_parquet
from tracer.job.load import load_job
from tracer.parsers import load_trace
from tracer.sql.session import query
from tracer.timeline import DeviceKey
from tracer.timeline.comm import collective_of_name, message_bytes, normalise_collective

DATA = Path(__file__).parent / "data"
EXTERNAL = DATA / "external"
GLOO = [DATA / "comm" / f"gloo_rank{r}.json.gz" for r in (0, 1)]
HTA_PAIR = [EXTERNAL / f"HTA_trace_filter_sampled_rank-{r}.json.gz" for r in (0, 1)]
HTA_NCCL = EXTERNAL / "HTA_nccl_parser_config_nccl_data.json.gz"
ROCM_RCCL = EXTERNAL / "TraceLens_mi300_resnet_act_checkpoint.json.gz"
BASE_NS = 1_790_000_000_000_000_000


# ---------------------------------------------------------------------------------------------------- names


@pytest.mark.parametrize(("name", "kind", "expected"), [
    ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)", "kernel", "allreduce"),
    ("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)", "kernel", "sendrecv"),
    ("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "kernel", "allgather"),
    ("ncclDevKernel_ReduceScatter_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "kernel", "reducescatter"),
    ("ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)", "kernel", "other"),  # NCCL >= 2.19, RCCL
    ("ncclDevKernel_Generic_4(ncclDevKernelArgsStorage<4096ul>)", "kernel", "other"),
    ("void at::native::vectorized_elementwise_kernel<4>(int)", "kernel", ""),
    ("nccl:all_reduce", "range", "allreduce"),
    ("nccl:_all_gather_base", "range", "allgather"),
    ("gloo:broadcast", "range", "broadcast"),
    ("nccl:all_reduce", "gpu_range", "allreduce"),
    ("record_param_comms", "cpu_op", "other"),  # its args name the collective
    ("c10d::allreduce_", "cpu_op", ""),  # the dispatcher's op around it: not counted twice
    ("nccl:all_reduce", "kernel", ""),  # a kernel is named by NCCL's kernel names only
    ("ncclKernel_AllReduce", "memcpy", ""),
])
def test_collective_of_name(name: str, kind: str, expected: str) -> None:
    assert collective_of_name(name, kind) == expected


@pytest.mark.parametrize(("text", "expected"), [
    ("allreduce", "allreduce"), ("all_reduce", "allreduce"), ("_allgather_base", "allgather"),
    ("allgather_into_tensor_coalesced", "allgather"), ("reduce_scatter_tensor", "reducescatter"),
    ("_reduce_scatter_base", "reducescatter"), ("all_to_all", "alltoall"), ("alltoall_base", "alltoall"),
    ("AllReduce", "allreduce"), ("Broadcast", "broadcast"), ("reduce", "reduce"), ("send", "send"),
    ("recv", "recv"), ("SendRecv", "sendrecv"), ("barrier", "barrier"), ("gather", "gather"), ("wait", "other"),
    ("", ""),
])
def test_normalise_collective(text: str, expected: str) -> None:
    assert normalise_collective(text) == expected


def test_message_bytes_is_the_larger_side_times_the_element_size() -> None:
    assert message_bytes(1000, 1000, "Float") == 4000
    assert message_bytes(500, 1000, "BFloat16") == 2000  # allgather: the gathered output
    assert message_bytes(1000, 250, "c10::Half") == 2000  # reducescatter: the full input
    assert message_bytes(1000, None, "Unknown") is None
    assert message_bytes(None, None, "Float") is None


def test_bus_factors_are_nccl_tests() -> None:
    assert bus_factor("allreduce", 8) == 2 * 7 / 8
    assert bus_factor("allgather", 8) == bus_factor("reducescatter", 8) == bus_factor("alltoall", 8) == 7 / 8
    assert bus_factor("broadcast", 8) == bus_factor("reduce", 8) == 1.0
    assert bus_factor("barrier", 8) is None and bus_factor("other", 8) is None


# ---------------------------------------------------------------------------------------------------- a hand-made job


def _x(cat: str, name: str, ts: int, dur: int, pid: Any, tid: Any, **args: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": pid, "tid": tid, "args": args}


def _collective(seq: int, coll: str, host_ts: int, kernel_ts: int, kernel_dur: int, corr: int,
                nelems: tuple[int, int], dtype: str, pg: str = "0") -> list[dict[str, Any]]:
    """A record_param_comms (with PyTorch's metadata) around the launch of a bare ncclDevKernel_Generic."""
    meta = {"Collective name": coll, "Process Group Name": pg, "Seq": seq, "In msg nelems": nelems[0],
            "Out msg nelems": nelems[1], "dtype": dtype, "Group size": 2}
    return [
        _x("cpu_op", "record_param_comms", host_ts, 10, 10, 1, **meta),
        _x("user_annotation", f"nccl:{coll}", host_ts + 1, 8, 10, 1),
        _x("cuda_runtime", "cudaLaunchKernel", host_ts + 2, 3, 10, 1, correlation=corr),
        _x("kernel", "ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)", kernel_ts, kernel_dur, 0, 7,
           device=0, stream=7, correlation=corr),
    ]


def _compute(ts: int, dur: int, corr: int) -> list[dict[str, Any]]:
    return [
        _x("cuda_runtime", "cudaLaunchKernel", ts - 5, 2, 10, 1, correlation=corr),
        _x("kernel", "gemm", ts, dur, 0, 8, device=0, stream=8, correlation=corr),
    ]


def _rank_trace(rank: int, events: list[dict[str, Any]], shift_us: int = 0) -> dict[str, Any]:
    for e in events:
        e["ts"] += shift_us
    return {"schemaVersion": 1, "baseTimeNanoseconds": BASE_NS, "distributedInfo": {"rank": rank, "world_size": 2},
            "traceEvents": events}


def _hand_job(tmp_path: Path, rank1_shift_us: int = 0) -> list[Path]:
    """Rank 0: allreduce seq 7 (kernel 110–150 µs), allgather seq 8 (305–325); compute 90–120 and 310–410.
    Rank 1: an allreduce seq 6 that rank 0's window missed, then seq 7 (130–150: the straggler) and seq 8
    (300–325)."""
    r0 = (_collective(7, "allreduce", 95, 110, 40, 1, (1000, 1000), "Float")
          + _collective(8, "allgather", 290, 305, 20, 3, (500, 1000), "BFloat16")
          + _compute(90, 30, 2) + _compute(310, 100, 4))
    r1 = (_collective(6, "allreduce", 10, 20, 30, 11, (1000, 1000), "Float")
          + _collective(7, "allreduce", 115, 130, 20, 1, (1000, 1000), "Float")
          + _collective(8, "allgather", 285, 300, 25, 3, (500, 1000), "BFloat16")
          + _compute(200, 50, 2))
    paths = []
    for rank, events in ((0, r0), (1, r1)):
        p = tmp_path / f"rank{rank}.json"
        p.write_text(json.dumps(_rank_trace(rank, events, rank1_shift_us if rank == 1 else 0)))
        paths.append(p)
    return paths


def test_a_bare_nccl_kernel_takes_the_metadata_of_the_record_it_was_launched_in(tmp_path: Path) -> None:
    ev = load_trace(_hand_job(tmp_path)[0], cache=False).events
    k = ev[ev["name"].astype(str).str.startswith("ncclDevKernel")].sort_values("start_ns")
    assert k["kind"].astype(str).tolist() == ["kernel", "kernel"]  # still kernels: comm is a column, not a kind
    assert k["collective"].astype(str).tolist() == ["allreduce", "allgather"]
    assert k["pg"].astype(str).tolist() == ["0", "0"]
    assert k["seq"].tolist() == [7, 8]
    assert k["bytes"].tolist() == [4000, 2000]
    assert k["group_size"].tolist() == [2, 2]
    gemm = ev[ev["name"] == "gemm"]
    assert set(gemm["collective"].astype(str)) == {""}
    host = ev[ev["name"] == "record_param_comms"]
    assert host["collective"].astype(str).tolist() == ["allreduce", "allgather"]


def test_per_gpu_compute_comm_overlap_exposed_by_hand(tmp_path: Path) -> None:
    job = load_job(_hand_job(tmp_path))
    got = {d.key: d for d in device_comm(job.events)}
    r0 = got[DeviceKey(0, 0)]
    # compute [90,120] + [310,410] = 130 µs; comm [110,150] + [305,325] = 60; overlap [110,120] + [310,325] = 25
    assert (r0.compute_ns, r0.comm_ns, r0.overlap_ns, r0.exposed_comm_ns) == (130_000, 60_000, 25_000, 35_000)
    assert (r0.kernels, r0.comm_kernels) == (2, 2)
    r1 = got[DeviceKey(1, 0)]
    assert (r1.compute_ns, r1.comm_ns, r1.overlap_ns, r1.exposed_comm_ns) == (50_000, 75_000, 0, 75_000)


@pytest.mark.slow
def test_collectives_are_matched_by_process_group_and_sequence_number(tmp_path: Path) -> None:
    result = collectives(load_job(_hand_job(tmp_path)).events)
    rows = {c.seq: c for c in result.rows}
    assert sorted(rows) == [6, 7, 8]
    assert rows[6].ranks == 1  # rank 0's window missed it: by order it would have been paired with seq 7
    ar, ag = rows[7], rows[8]
    assert (ar.collective, ar.pg, ar.matched_by, ar.where, ar.ranks) == ("allreduce", "0", "seq", "gpu", 2)
    assert (ar.skew_ns, ar.straggler, ar.dur_ns, ar.bytes) == (20_000, 1, 20_000, 4000)
    assert ar.algbw_gb_s == 0.2 and ar.busbw_gb_s == 0.2  # 4000 B / 20 µs; x 2(n-1)/n = 1 for n = 2
    assert (ag.collective, ag.skew_ns, ag.straggler, ag.dur_ns, ag.bytes) == ("allgather", 5_000, 0, 20_000, 2000)
    assert ag.algbw_gb_s == 0.1 and ag.busbw_gb_s == 0.05  # x (n-1)/n
    ranks = {k.rank: k for k in result.ranks}
    assert (ranks[1].collectives, ranks[1].straggler, ranks[1].max_late_ns) == (2, 1, 20_000)
    assert (ranks[0].straggler, ranks[0].max_late_ns, ranks[0].mean_late_ns) == (1, 5_000, 2_500)
    # seq 7: rank 1 may move by [110 − 150, 150 − 130]; seq 8: [305 − 325, 325 − 300] µs → [−20, 20]: consistent
    assert (ranks[1].offset_lo_ns, ranks[1].offset_hi_ns, ranks[1].clock_fix_ns) == (-20_000, 20_000, 0)


@pytest.mark.slow
def test_a_clock_behind_is_bounded_by_the_collectives_and_the_fix_makes_them_consistent(tmp_path: Path) -> None:
    job = load_job(_hand_job(tmp_path, rank1_shift_us=-100))  # rank 1's clock 100 µs behind
    ranks = {k.rank: k for k in collectives(job.events).ranks}
    # seq 7 on rank 1 now ends (50 µs) before rank 0 starts it (110): lo = max(110 − 50, 305 − 225) = 80 µs
    assert (ranks[1].offset_lo_ns, ranks[1].offset_hi_ns, ranks[1].clock_fix_ns) == (80_000, 120_000, 80_000)
    fixed = shift_ranks(job.events, {1: ranks[1].clock_fix_ns or 0})
    again = {k.rank: k for k in collectives(fixed).ranks}
    assert again[1].clock_fix_ns == 0 and again[1].offset_lo_ns == 0
    moved = job.events["rank"].to_numpy() == 1
    assert (fixed["start_ns"].to_numpy()[moved] - job.events["start_ns"].to_numpy()[moved] == 80_000).all()
    assert (fixed["start_ns"].to_numpy()[~moved] == job.events["start_ns"].to_numpy()[~moved]).all()


@pytest.mark.slow
def test_summary_json_and_text_carry_the_comm_figures_and_the_table(tmp_path: Path, capsys: Any) -> None:
    paths = _hand_job(tmp_path)
    assert main(["summary", "--json", "--no-cache", "--job", *map(str, paths)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["comm"]["0/0"] == {"compute_ns": 130_000, "comm_ns": 60_000, "overlap_ns": 25_000,
                                  "exposed_comm_ns": 35_000, "kernels": 2, "comm_kernels": 2}
    assert [c["seq"] for c in doc["collectives"]] == [6, 7, 8]
    assert doc["collective_ranks"]["ranks"][1]["straggler"] == 1
    # after every key there was before
    assert list(doc)[-5:] == ["comm", "comm_total", "collectives", "collective_ranks", "launches"]
    # the job's total: every GPU's figures summed, however many GPUs
    gpus = doc["comm"].values()
    assert doc["comm_total"] == {**{k: sum(g[k] for g in gpus) for k in doc["comm"]["0/0"]}, "gpus": len(gpus)}
    assert main(["summary", "--no-cache", "--job", *map(str, paths)]) == 0
    text = capsys.readouterr().out
    assert "Per GPU communication" in text and "Collectives by start skew (top 2 of 2)" in text
    # the per-GPU table's kernels count the comm kernels too: its title says so where there are some
    assert "kernels: all, comm included" in " ".join(text.split())
    total = doc["comm_total"]
    assert f"job {total['kernels']:,} {total['comm_kernels']:,} {total['compute_ns'] / 1e6:,.3f}" in " ".join(
        text.split())
    assert "Skew per rank" in text


def test_summary_of_a_trace_without_communication_is_unchanged() -> None:
    doc = analyze(load_trace(DATA / "pair_kineto.json.gz", cache=False)).to_dict()
    assert not {"comm", "comm_total", "collectives", "collective_ranks"} & set(doc)


# ---------------------------------------------------------------------------------------------------- gloo, CPU


@pytest.mark.slow
def test_gloo_ranks_on_the_cpu_are_matched_by_order_from_their_host_ranges(capsys: Any) -> None:
    assert main(["summary", "--json", "--no-cache", "--job", *map(str, GLOO)]) == 0
    doc = json.loads(capsys.readouterr().out)
    rows = doc["collectives"]
    assert len(rows) == 12 and {r["ranks"] for r in rows} == {2}
    assert {r["where"] for r in rows} == {"host"} and {r["matched_by"] for r in rows} == {"order"}
    assert sorted((r["collective"], r["seq"]) for r in rows) == sorted(
        (c, i) for c in ("allreduce", "allgather", "broadcast", "barrier") for i in range(3))
    # rank 1 sleeps 2 ms before each barrier (tests/data/comm/record_gloo.py): it is every barrier's straggler
    barriers = [r for r in rows if r["collective"] == "barrier"]
    assert {r["straggler"] for r in barriers} == {1} and min(r["skew_ns"] for r in barriers) > 2_000_000
    assert "comm" not in doc  # no GPU: no per-GPU comm figures
    assert main(["summary", "--no-cache", "--all-collectives", "--job", *map(str, GLOO)]) == 0
    assert "top 12 of 12" in capsys.readouterr().out


# ---------------------------------------------------------------------------------------------------- real traces


def _ns(text: Decimal) -> int:
    return int((text * 1000).quantize(Decimal(1), rounding=ROUND_HALF_EVEN))


def _union_ns(starts: np.ndarray, ends: np.ndarray) -> int:
    """Length of the union of [start, end) intervals: sorted, merged with a running maximum, in plain numpy."""
    if not starts.size:
        return 0
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    total, cur_s, cur_e = 0, int(s[0]), int(e[0])
    for a, b in zip(s[1:].tolist(), e[1:].tolist()):
        if a > cur_e:
            total += cur_e - cur_s
            cur_s, cur_e = a, b
        else:
            cur_e = max(cur_e, b)
    return total + cur_e - cur_s


_COMM_KERNEL = re.compile(r"^[nr]ccl(Dev)?Kernel")


def _independent(path: Path) -> dict[int, tuple[int, int, int, int, int, int]]:
    """device → (compute kernels, comm kernels, compute, comm, overlap, exposed) ns, from the JSON text alone: a
    kernel is comm when its name is an NCCL / RCCL kernel's; overlap = compute + comm − their union."""
    with gzip.open(path, "rt") as f:
        doc = json.load(f, parse_float=Decimal, parse_int=Decimal)
    per: dict[int, dict[bool, list[tuple[int, int]]]] = {}
    for e in doc["traceEvents"]:
        if e.get("ph") != "X" or e.get("cat") != "kernel":
            continue
        args = e.get("args") or {}
        device = int(args.get("device", e.get("pid")))
        start = _ns(Decimal(e["ts"]))
        end = _ns(Decimal(e["ts"]) + Decimal(e.get("dur", 0)))
        per.setdefault(device, {True: [], False: []})[bool(_COMM_KERNEL.match(e["name"]))].append((start, end))
    out = {}
    for device, parts in per.items():
        comp = np.array(parts[False], dtype=np.int64).reshape(-1, 2)
        comm = np.array(parts[True], dtype=np.int64).reshape(-1, 2)
        both = np.concatenate([comp, comm])
        c, m = _union_ns(comp[:, 0], comp[:, 1]), _union_ns(comm[:, 0], comm[:, 1])
        overlap = c + m - _union_ns(both[:, 0], both[:, 1])
        out[device] = (len(comp), len(comm), c, m, overlap, m - overlap)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("path", [*HTA_PAIR, HTA_NCCL, ROCM_RCCL], ids=lambda p: p.name)
def test_per_gpu_comm_figures_of_real_traces_equal_an_independent_computation(path: Path) -> None:
    got = {d.device: (d.kernels, d.comm_kernels, d.compute_ns, d.comm_ns, d.overlap_ns, d.exposed_comm_ns)
           for d in device_comm(load_trace(path, cache=False).events)}
    assert got == _independent(path)
    assert all(v[1] > 0 for v in got.values())


def test_the_hta_ranks_as_a_job_give_each_rank_its_own_files_figures() -> None:
    job = {d.rank: (d.device, d.compute_ns, d.comm_ns, d.overlap_ns) for d in device_comm(load_job(HTA_PAIR).events)}
    for rank, path in enumerate(HTA_PAIR):
        ((device, v),) = _independent(path).items()
        assert job[rank] == (device, v[2], v[3], v[4])


def test_the_nccl_metadata_trace_names_every_kernel_and_sizes_it() -> None:
    ev = load_trace(HTA_NCCL, cache=False).events
    k = ev[(ev["kind"] == "kernel") & (ev["collective"] != "")]
    assert k["collective"].astype(str).value_counts().to_dict() == {"allreduce": 15, "broadcast": 6}
    assert set(k["pg"].astype(str)) == {"0"} and set(k["group_size"]) == {2}
    with gzip.open(HTA_NCCL, "rt") as f:
        args = [e["args"] for e in json.load(f)["traceEvents"] if e.get("cat") == "kernel" and
                "Collective name" in e.get("args", {})]
    size = {"Float": 4, "Long": 8}
    assert {a["dtype"] for a in args} == set(size)
    assert sorted(k["bytes"].tolist()) == sorted(max(a["In msg nelems"], a["Out msg nelems"]) * size[a["dtype"]]
                                                 for a in args)


def test_rocm_rccl_generic_kernels_take_the_collective_of_their_host_record() -> None:
    ev = load_trace(ROCM_RCCL, cache=False).events
    k = ev[(ev["kind"] == "kernel") & (ev["collective"] != "")]
    counts = k["collective"].astype(str).value_counts().to_dict()
    assert counts["allreduce"] == 6 and counts["broadcast"] == 6
    assert set(k.loc[k["collective"] == "allreduce", "group_size"]) == {8}


# ---------------------------------------------------------------------------------------------------- storage, sql


def test_parquet_of_schema_2_loads_with_the_collectives_its_names_give(tmp_path: Path) -> None:
    t = load_trace(HTA_PAIR[0], cache=False)
    table = pa.Table.from_pandas(t.events.drop(columns=["collective", "pg", "seq", "group_size"]),
                                 preserve_index=False)
    meta = {**t.meta.to_dict(), "schema_version": 2}
    table = table.replace_schema_metadata({b"tracer": json.dumps(meta).encode()})
    pq.write_table(table, tmp_path / "old.parquet")
    back = load_trace(tmp_path / "old.parquet").events
    assert back["collective"].tolist() == t.events["collective"].tolist()  # this trace has no metadata to lose
    got = query(tmp_path / "old.parquet", "SELECT collective, count(*) AS n FROM comm WHERE kind = 'kernel' "
                                          "GROUP BY 1")
    assert dict(zip(got["collective"], got["n"])) == {"sendrecv": 10}


def test_parquet_now_keeps_the_metadata_and_sql_shows_it(tmp_path: Path) -> None:
    t = load_trace(HTA_NCCL, cache=False)
    write_timeline_parquet(t, tmp_path / "t.parquet")
    back = load_trace(tmp_path / "t.parquet").events
    for c in ("collective", "seq", "group_size", "bytes"):
        assert back[c].tolist() == t.events[c].tolist(), c
    assert back["pg"].astype(str).tolist() == t.events["pg"].astype(str).tolist()
    got = query(tmp_path / "t.parquet", "SELECT collective, pg, count(*) AS n, sum(bytes) AS b FROM comm "
                                        "WHERE kind = 'kernel' GROUP BY ALL ORDER BY 1")
    assert got["collective"].tolist() == ["allreduce", "broadcast"] and set(got["pg"]) == {"0"}
    assert got["n"].tolist() == [15, 6]


@pytest.mark.slow
def test_the_nsys_export_keeps_nccl_kernels_as_kernels(tmp_path: Path) -> None:
    t = load_trace(HTA_NCCL, cache=False)
    assert main(["export", str(HTA_NCCL), "-o", str(tmp_path / "t.sqlite"), "--no-cache"]) == 0
    back = load_trace(tmp_path / "t.sqlite", cache=False).events
    kernels = back[back["kind"] == "kernel"]
    assert len(kernels) == int((t.events["kind"] == "kernel").sum())
    nccl = kernels[kernels["collective"] != ""]
    assert len(nccl) == 21  # read back from their names (the export carries no collective metadata)
    mine = pd.Series([d.comm_ns for d in device_comm(back)])
    assert mine.tolist() == [d.comm_ns for d in device_comm(t.events)]


@pytest.mark.slow
def test_summary_clock_fix_moves_a_rank_whose_clock_is_behind(tmp_path: Path, capsys: Any) -> None:
    paths = _hand_job(tmp_path, rank1_shift_us=-100)
    assert main(["summary", "--json", "--no-cache", "--job", *map(str, paths)]) == 0
    before = json.loads(capsys.readouterr().out)["collective_ranks"]["ranks"][1]
    assert before["clock_fix_ns"] == 80_000
    assert main(["summary", "--json", "--no-cache", "--clock-fix", "--job", *map(str, paths)]) == 0
    out = capsys.readouterr()
    after = json.loads(out.out)["collective_ranks"]["ranks"][1]
    assert (after["clock_fix_ns"], after["offset_lo_ns"]) == (0, 0)
    assert "rank 1: clock moved by 80.0 µs (--clock-fix)" in out.err


@pytest.mark.parametrize(("args", "expected"), [
    # (what a hostile or older trace writes) -> (collective, pg, seq, group_size, bytes) of the record
    ({"Collective name": "allreduce", "Seq": "12", "Process Group Name": "0"}, ("allreduce", "0", 12, 0, None)),
    ({"Collective name": "allreduce", "Seq": "x", "Group size": -3}, ("allreduce", "", None, 0, None)),
    ({"Collective name": 5, "Process Group Name": [1]}, ("other", "", None, 0, None)),  # its name still says comm
    ({"Collective name": "broadcast", "Process Group ID": 3, "In msg nelems": 10, "dtype": "Double"},
     ("broadcast", "3", None, 0, 80)),
    ({"Collective name": "allgather", "In msg nelems": 2**60, "Out msg nelems": 2**60, "dtype": "Float"},
     ("allgather", "", None, 0, None)),  # 4 EiB: no size a message can have
    ({"Collective name": "allreduce", "In msg nelems": -1, "dtype": "Float"}, ("allreduce", "", None, 0, None)),
    ({"Collective name": "allreduce", "Seq": 2**64 - 1, "Group size": 2**40}, ("allreduce", "", None, 0, None)),
])
def test_collective_metadata_of_any_shape_is_read_or_left_out(tmp_path: Path, args: dict[str, Any],
                                                              expected: tuple[Any, ...]) -> None:
    p = tmp_path / "t.json"
    p.write_text(json.dumps(_rank_trace(0, [_x("cpu_op", "record_param_comms", 10, 5, 1, 1, **args),
                                            _x("cpu_op", "aten::add", 20, 5, 1, 1)])))
    ev = load_trace(p, cache=False).events
    row = ev[ev["name"] == "record_param_comms"].iloc[0]
    got = (str(row["collective"]), str(row["pg"]), None if pd.isna(row["seq"]) else int(row["seq"]),
           int(row["group_size"]), None if pd.isna(row["bytes"]) else int(row["bytes"]))
    assert got == expected
    assert str(ev.loc[ev["name"] == "aten::add", "collective"].iloc[0]) == ""


def test_the_comm_summary_reads_back_from_its_json(tmp_path: Path) -> None:
    from tracer.analysis.summary import Summary

    s = analyze(load_job(_hand_job(tmp_path, rank1_shift_us=-100)))
    doc = s.to_dict()
    back = Summary.from_dict(json.loads(json.dumps(doc)))
    assert back.to_dict() == doc
    assert back.part("collectives") == s.part("collectives")
    assert back.part("comm") == s.part("comm")


@pytest.mark.slow
@pytest.mark.parametrize("paths", [HTA_PAIR, [HTA_NCCL], [ROCM_RCCL]], ids=["hta-pair", "hta-nccl", "rocm-rccl"])
def test_one_compute_for_the_per_gpu_and_the_comm_tables(paths: list[Path]) -> None:
    """compute = kernels that are not communication, in both tables; the copy overlap is copy hidden behind that
    compute (computed here independently: plain numpy unions)."""
    from tracer.analysis.overlap import device_overlap

    events = load_job(paths).events if len(paths) > 1 else load_trace(paths[0]).events
    comm = {DeviceKey(d.rank, d.device): d for d in device_comm(events)}
    assert comm, "the trace has comm kernels"

    def union(s: np.ndarray, e: np.ndarray) -> list[tuple[int, int]]:
        out: list[tuple[int, int]] = []
        for a, b in sorted(zip(s.tolist(), e.tolist())):
            if out and a <= out[-1][1]:
                out[-1] = (out[-1][0], max(out[-1][1], b))
            elif b > a:
                out.append((a, b))
        return out

    def meet(x: list[tuple[int, int]], y: list[tuple[int, int]]) -> int:
        return sum(max(0, min(b, d) - max(a, c)) for a, b in x for c, d in y)

    for d in device_overlap(events):
        key = d.key
        rows = events[(events["rank"] == key.rank) & (events["device"] == d.device)]
        k = rows[(rows["kind"] == "kernel") & (rows["collective"] == "")]
        c = rows[rows["kind"] == "memcpy"]
        comp = union(k["start_ns"].to_numpy(), k["end_ns"].to_numpy())
        copy = union(c["start_ns"].to_numpy(), c["end_ns"].to_numpy())
        assert d.compute_ns == sum(b - a for a, b in comp) == comm[key].compute_ns
        assert d.overlap_ns == meet(comp, copy)
