"""Which frame of the user's code each host call ran under (issue 37).

torch.profiler with ``with_stack=True`` records the Python frames of every thread it traces (the timeline's
``python`` rows, ``FILE(LINE): FUNC``), properly nested with the operators and CUDA calls of the same thread.
For every host call (an operator, a CUDA runtime or driver call) :func:`attribute` finds the innermost enclosing
frame that belongs to the user's code (:class:`SourceRule`: not torch, not Python's library, not an installed
package, not tracer), the chain of user frames above it, and the frame just below it on the way to the call
(its *entry*: the library function or the operator the user's line called, which says what that line did:
``<built-in method item of Tensor object>``, ``torch/_tensor.py(…): backward``, ``aten::mul``).

A thread without any frame (PyTorch's autograd threads, which run ``loss.backward()``'s operators) takes the
frames of its process's thread that has the most of them, at the moment of each call: the user's line that was
waiting on it (marked ``borrowed``), as a range's GPU time counts the work of such threads (docs/design.md).

Vectorised: one sort of each thread's frames and calls (nested as one tree), parents found level by level
(one ``searchsorted`` per nesting depth), the user frame and the entry propagated level by level. Which line
*inside* the user's function made the call is not in the trace (a frame's LINE is its function's first line);
:mod:`tracer.analysis.source_code` reads it from the source where the file can be found.
"""

from __future__ import annotations

import fnmatch
import os
import re
import sys
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np
import pandas as pd

from tracer.timeline import KINDS
from tracer.timeline.keys import key_codes

#: Host rows that get a source: framework operators and CUDA calls (GPU work gets its launch call's).
CALL_KINDS: tuple[str, ...] = ("cpu_op", "runtime", "driver")
#: ``FILE(LINE): FUNC``, torch.profiler's name of a Python function's frame.
FRAME = re.compile(r"^(?P<file>.+)\((?P<line>\d+)\): (?P<func>.*)$", re.DOTALL)

#: First path components (a module or package, ``.py`` dropped) that are never the user's: Python's own library
#: (``sys.stdlib_module_names``) and the packages a training script runs on. torch.profiler writes a library's
#: file relative to the sys.path entry it came from (``torch/nn/modules/linear.py``, ``contextlib.py``), so the
#: installation folder (site-packages) is rarely in the name; its first component is.
LIBRARY_PACKAGES: frozenset[str] = frozenset(sys.stdlib_module_names) | frozenset((
    "torch", "torchvision", "torchaudio", "torchtext", "torchdata", "torchrec", "torchmetrics", "torch_xla",
    "functorch", "triton", "numpy", "scipy", "pandas", "sklearn", "PIL", "cv2", "tracer", "typing_extensions",
    "transformers", "accelerate", "deepspeed", "apex", "fairscale", "megatron", "lightning", "pytorch_lightning",
    "lightning_fabric", "lightning_utilities", "timm", "einops", "flash_attn", "xformers", "safetensors",
    "huggingface_hub", "datasets", "tokenizers", "peft", "trl", "vllm", "sglang", "tqdm", "tensorboard", "wandb",
    "hydra", "omegaconf", "fsspec", "filelock", "packaging", "jinja2", "sympy", "networkx", "_pytest", "pytest",
    "pluggy", "IPython", "ipykernel", "tornado", "zmq", "traitlets", "jupyter_client", "debugpy", "_pydevd_bundle",
    "pydevd", "nvidia", "cupy", "jax", "jaxlib", "msgspec", "orjson", "rich", "typer", "click", "dask",
    "distributed", "pyarrow", "duckdb", "plotly", "dash", "flask", "werkzeug", "setuptools", "pkg_resources",
    "_distutils_hack", "importlib_metadata", "zipp", "six", "attr", "attrs", "yaml", "regex", "requests", "urllib3",
))
#: Parts of an absolute path that mark an installed or Python's own file.
LIBRARY_PARTS: tuple[str, ...] = ("/site-packages/", "/dist-packages/", "/lib/python3", "/lib64/python3",
                                  "/lib/pypy", "/.pyenv/", "/python3.")
_GLOB = re.compile(r"[*?\[]")


def parse_frame(name: str) -> tuple[str, int, str] | None:
    """``FILE(LINE): FUNC`` → (file, line, function); None for a frame of no file (a built-in's, a module's
    ``nn.Module: Linear_0``)."""
    m = FRAME.match(name)
    if m is None:
        return None
    return m.group("file"), int(m.group("line")), m.group("func")


def is_library(file: str) -> bool:
    """Whether a frame's file is a library's rather than the user's (the default rule): ``<frozen …>``,
    ``<string>``; an absolute path under site-packages, dist-packages or a Python installation; a relative one
    whose first component is one of :data:`LIBRARY_PACKAGES` (``torch/``, ``contextlib.py``, ``tracer/``)."""
    f = file.replace("\\", "/")
    if not f or f.startswith("<"):
        return True
    if f.startswith("/") or re.match(r"^[A-Za-z]:/", f):
        return any(part in f for part in LIBRARY_PARTS)
    head = f.lstrip("./").split("/", 1)[0]
    return head.removesuffix(".py") in LIBRARY_PACKAGES


@dataclass(frozen=True)
class SourceRule:
    """Which frames are the user's: every frame with a file that :func:`is_library` does not claim, and also
    those under one of ``roots`` (``--source-root``): a folder (an absolute file under it, or a relative one that
    is found in it) or a glob matched against the file as the trace names it (``'vllm/*'``, ``'*/mylib/*'``)."""

    roots: tuple[str, ...] = ()
    _seen: dict[str, bool] = field(default_factory=dict, compare=False, hash=False, repr=False)

    def is_user(self, file: str) -> bool:
        hit = self._seen.get(file)
        if hit is None:
            hit = self._seen[file] = self.widened(file) or not is_library(file)
        return hit

    def widened(self, file: str) -> bool:
        """Whether ``file`` is the user's by one of :attr:`roots`."""
        f = file.replace("\\", "/")
        for root in self.roots:
            if _GLOB.search(root):
                if fnmatch.fnmatchcase(f, root):
                    return True
                continue
            base = os.path.abspath(os.path.expanduser(root))
            if os.path.isabs(f):
                if f.startswith(base.rstrip("/") + "/"):
                    return True
            elif _is_file(os.path.join(base, f)) or (
                    f.startswith(os.path.basename(base) + "/") and _is_file(os.path.join(os.path.dirname(base), f))):
                return True
        return False


@lru_cache(maxsize=4096)
def _is_file(path: str) -> bool:
    return os.path.isfile(path)


@dataclass(frozen=True)
class Attribution:
    """What :func:`attribute` found, by timeline row (index labels of the events).

    ``calls``: one row per host call that ran under a user frame (index: the call's row): ``frame`` (the
    innermost user frame's row), ``entry`` (the row just below that frame on the way to the call: a library
    frame, an operator, or the call itself), ``borrowed`` (True where the call's thread has no frames and the
    frame is its process's main thread's at that moment). ``frames``: one row per user frame that has a call
    under it, or a user frame under it (index: its row): ``file``, ``line`` (as the trace names it), ``function``,
    ``parent`` (the next user frame up, -1 for the outermost), ``entry`` (the row just below ``parent`` on the
    way to it, -1 without a parent), ``start_ns``. ``has_stacks``: whether the timeline holds Python frames.
    """

    calls: pd.DataFrame
    frames: pd.DataFrame
    has_stacks: bool
    user_frames: int = 0

    def chain(self, frame: int) -> list[int]:
        """The user frames from ``frame`` outwards (``frame`` first)."""
        out: list[int] = []
        parent = self.frames["parent"]
        while frame >= 0 and frame in parent.index and frame not in out:
            out.append(frame)
            frame = int(parent[frame])
        return out


#: What a timeline without Python frames is told (one note).
NO_STACKS = ("no Python stacks in this trace, so no source lines: record with torch.profiler(with_stack=True) "
             "or `tracer record --stacks`")
NO_USER_FRAMES = ("the trace's Python frames are all library code (torch, Python's library, installed packages): "
                  "no frame of the user's; --source-root DIR or a glob counts more files as the user's")


def _empty_calls() -> pd.DataFrame:
    return pd.DataFrame({"frame": pd.Series([], dtype="int64"), "entry": pd.Series([], dtype="int64"),
                         "borrowed": pd.Series([], dtype=bool)})


def _empty_frames() -> pd.DataFrame:
    return pd.DataFrame({"file": pd.Series([], dtype=object), "line": pd.Series([], dtype="int64"),
                         "function": pd.Series([], dtype=object), "parent": pd.Series([], dtype="int64"),
                         "entry": pd.Series([], dtype="int64"), "start_ns": pd.Series([], dtype="int64")})


def attribute(events: pd.DataFrame, rule: SourceRule | None = None) -> Attribution:
    """For every host call of ``events`` (:data:`CALL_KINDS` on a host thread), the innermost user frame it ran
    under (``rule``, default :class:`SourceRule`), with the entry below it and the frames above (see
    :class:`Attribution`). A timeline without ``python`` rows gives empty tables and ``has_stacks`` False."""
    rule = rule or SourceRule()
    codes = events["kind"].cat.codes.to_numpy()
    host = events["device"].to_numpy() < 0
    is_frame = host & (codes == KINDS.index("python"))
    if not is_frame.any():
        return Attribution(_empty_calls(), _empty_frames(), False)
    is_call = host & np.isin(codes, [KINDS.index(k) for k in CALL_KINDS])
    # which frames are the user's: one test per distinct name
    names = events["name"].cat
    cats = names.categories
    name_codes = names.codes.to_numpy()
    frame_rows = np.flatnonzero(is_frame)
    used = np.unique(name_codes[frame_rows])
    used = used[used >= 0]
    user_cat = np.zeros(len(cats) + 1, dtype=bool)  # (the last slot: a missing name, never the user's)
    parsed: dict[int, tuple[str, int, str]] = {}
    for c in used.tolist():
        got = parse_frame(str(cats[c]))
        if got is not None and rule.is_user(got[0]):
            user_cat[c] = True
            parsed[c] = got
    user = np.zeros(len(events), dtype=bool)
    user[frame_rows] = user_cat[np.where(name_codes[frame_rows] >= 0, name_codes[frame_rows], len(cats))]
    n_user = int(user.sum())
    if not n_user:
        return Attribution(_empty_calls(), _empty_frames(), True)

    rows = np.flatnonzero(is_frame | is_call)
    rank, pid, tid = (events[c].to_numpy(np.int64)[rows] for c in ("rank", "pid", "tid"))
    thread, n_threads = key_codes(rank, pid, tid)
    start = events["start_ns"].to_numpy(np.int64)[rows]
    end = np.maximum(events["end_ns"].to_numpy(np.int64)[rows], start + 1)  # (zero-length: 1 ns, to nest)
    frame_of = is_frame[rows]
    # one tree per thread: frames and calls together, parents before children (frames first among equals)
    order = np.lexsort((~frame_of, -end, start, thread))
    rows, thread, start, end, frame_of = rows[order], thread[order], start[order], end[order], frame_of[order]
    user_of = user[rows]
    n = rows.size
    parent = np.full(n, -1, dtype=np.int64)
    depth = np.zeros(n, dtype=np.int64)
    bounds = np.flatnonzero(np.diff(thread)) + 1
    lo_hi = list(zip(np.r_[0, bounds].tolist(), np.r_[bounds, n].tolist(), strict=True))
    for lo, hi in lo_hi:
        depth[lo:hi], parent[lo:hi] = _nest(start[lo:hi], end[lo:hi])
        parent[lo:hi] = np.where(parent[lo:hi] >= 0, parent[lo:hi] + lo, -1)
    # top down, level by level: the innermost user frame at or above each node (-1: none), and the entry (the
    # node just below that frame on the way down; -1 for the frame itself)
    owner = np.full(n, -1, dtype=np.int64)
    entry = np.full(n, -1, dtype=np.int64)
    by_level = np.argsort(depth, kind="stable")
    level_bounds = np.searchsorted(depth[by_level], np.arange(int(depth.max()) + 2))
    for d in range(int(depth.max()) + 1):
        at = by_level[level_bounds[d]:level_bounds[d + 1]]
        p = parent[at]
        has_p = p >= 0
        p_owner = np.where(has_p, owner[np.maximum(p, 0)], -1)
        p_user = has_p & user_of[np.maximum(p, 0)]
        owner[at] = np.where(user_of[at], at, p_owner)
        entry[at] = np.where(user_of[at], -1, np.where(p_user, at, np.where(has_p, entry[np.maximum(p, 0)], -1)))
    # each user frame's parent user frame and the entry that leads to it
    uf = np.flatnonzero(user_of)
    up = parent[uf]
    f_parent = np.where(up >= 0, owner[np.maximum(up, 0)], -1)
    f_entry = np.where(f_parent < 0, -1, np.where(user_of[np.maximum(up, 0)], uf, entry[np.maximum(up, 0)]))

    call_pos = np.flatnonzero(~frame_of)
    c_owner, c_entry = owner[call_pos], entry[call_pos]
    borrowed = np.zeros(call_pos.size, dtype=bool)
    # calls under no user frame of their own thread: the frames of their process's thread with the most user
    # frames, at each call's start (autograd threads run the backward's operators while the main thread waits in
    # loss.backward(); their own frames, if any, are the library's: activation checkpointing's recompute)
    lonely = c_owner < 0
    if lonely.any():
        b_owner, b_entry = _borrow(call_pos[lonely], rank[order], pid[order], thread, start, end, user_of, parent,
                                   owner, entry, lo_hi)
        c_owner[lonely], c_entry[lonely] = b_owner, b_entry
        borrowed[lonely] = b_owner >= 0
    keep = c_owner >= 0
    label = events.index.to_numpy()
    calls = pd.DataFrame({"frame": label[rows[c_owner[keep]]].astype(np.int64),
                          "entry": label[rows[c_entry[keep]]].astype(np.int64),
                          "borrowed": borrowed[keep]}, index=pd.Index(label[rows[call_pos[keep]]], name="row"))
    # the user frames that matter: those with calls under them, and their chains
    needed = np.zeros(n, dtype=bool)
    needed[c_owner[keep]] = True
    f_parent_full = np.full(n, -1, dtype=np.int64)
    f_parent_full[uf] = f_parent
    frontier = np.flatnonzero(needed)
    while frontier.size:
        nxt = f_parent_full[frontier]
        nxt = nxt[(nxt >= 0) & ~needed[np.maximum(nxt, 0)]]
        needed[nxt] = True
        frontier = nxt
    sel = uf[needed[uf]]
    f_entry_full = np.full(n, -1, dtype=np.int64)
    f_entry_full[uf] = f_entry
    codes_sel = name_codes[rows[sel]]
    info = [parsed[int(c)] for c in codes_sel.tolist()]
    fp, fe = f_parent_full[sel], f_entry_full[sel]
    frames = pd.DataFrame({
        "file": [i[0] for i in info], "line": np.array([i[1] for i in info], dtype=np.int64),
        "function": [i[2] for i in info],
        "parent": np.where(fp >= 0, label[rows[np.maximum(fp, 0)]], -1).astype(np.int64),
        "entry": np.where(fe >= 0, label[rows[np.maximum(fe, 0)]], -1).astype(np.int64),
        "start_ns": start[sel],
    }, index=pd.Index(label[rows[sel]], name="row"))
    return Attribution(calls.sort_index(), frames.sort_index(), True, n_user)


def _nest(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Depth and parent (position, -1 for none) of one thread's intervals, sorted parents first (start, then
    longest): depth = the intervals started before minus those ended by its start (exact for proper nesting);
    the parent = the last interval before it one level up."""
    n = start.size
    ended = np.searchsorted(np.sort(end), start, side="right")
    depth = np.maximum(np.arange(n) - ended, 0)
    parent = np.full(n, -1, dtype=np.int64)
    by_level = np.lexsort((np.arange(n), depth))
    level_bounds = np.searchsorted(depth[by_level], np.arange(int(depth.max()) + 2))
    for d in range(1, int(depth.max()) + 1):
        here = by_level[level_bounds[d]:level_bounds[d + 1]]
        above = by_level[level_bounds[d - 1]:level_bounds[d]]
        k = np.searchsorted(above, here) - 1
        parent[here] = np.where(k >= 0, above[np.maximum(k, 0)], -1)
    return depth, parent


def _borrow(calls: np.ndarray, rank: np.ndarray, pid: np.ndarray, thread: np.ndarray, start: np.ndarray,
            end: np.ndarray, user_of: np.ndarray, parent: np.ndarray, owner: np.ndarray, entry: np.ndarray,
            lo_hi: list[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
    """For calls under no user frame of their own thread: the owner and entry of the innermost node open at each
    call's start on the thread of the same (rank, pid) with the most user frames (not the call's own); -1 where
    there is none."""
    out_owner = np.full(calls.size, -1, dtype=np.int64)
    out_entry = np.full(calls.size, -1, dtype=np.int64)
    # the thread with the most user frames in each process
    best: dict[tuple[int, int], tuple[int, int, int]] = {}
    for lo, hi in lo_hi:
        k = (int(rank[lo]), int(pid[lo]))
        count = int(user_of[lo:hi].sum())
        if count and (k not in best or count > best[k][0]):
            best[k] = (count, lo, hi)
    c_rank, c_pid, c_thread = rank[calls], pid[calls], thread[calls]
    for (r, p), (_count, lo, hi) in best.items():
        mine = np.flatnonzero((c_rank == r) & (c_pid == p) & (c_thread != thread[lo]))
        if not mine.size:
            continue
        t = start[calls[mine]]
        s = start[lo:hi]
        # the innermost node open at t: the last to start by t, then up its parents until one is still open
        at = np.searchsorted(s, t, side="right") - 1 + lo
        pending = np.flatnonzero(at >= lo)
        node = np.full(mine.size, -1, dtype=np.int64)
        while pending.size:
            a = at[pending]
            open_ = end[a] > t[pending]
            node[pending[open_]] = a[open_]
            up = parent[a[~open_]]
            pending = pending[~open_][up >= 0]
            at[pending] = up[up >= 0]
        hit = node >= 0
        out_owner[mine[hit]] = owner[node[hit]]
        # the entry of the node itself; the node is the owner: nothing below it (the user's line waited in it)
        ent = entry[node[hit]]
        out_entry[mine[hit]] = np.where(ent >= 0, ent, node[hit])
    return out_owner, out_entry


def of_rows(attribution: Attribution, rows: np.ndarray | pd.Index) -> pd.Series:
    """The user frame (row) of each of ``rows`` (host calls), -1 where none."""
    frame = attribution.calls["frame"]
    out = frame.reindex(np.asarray(rows)).fillna(-1).astype(np.int64)
    out.index = pd.Index(np.asarray(rows))
    return out
