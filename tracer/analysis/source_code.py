"""The line of the user's code each host call came from, read from the user's source (issue 37).

A Python frame in a torch.profiler trace says which function ran (``train.py(4): step``: LINE is the function's
first line), not which line of it was running. The line is recovered from the source file, where it can be found
(:class:`SourceFiles`): the calls one run of a user function made, in time order (the *entries* of
:mod:`tracer.analysis.source`: ``<built-in method item of Tensor object>``, ``torch/_tensor.py(…): backward``,
``nn.Module: Linear_0``, ``aten::mul``), are matched to the lines of that function that can make them (its
``ast``: a call of ``.item``, of ``backward``, a ``*``), in source order, a loop going back:

1. a named call (a method, a function) goes to the first line at or after the previous named call's line that
   calls that name (``loss.item()``); none after it: the first such line (the loop went round);
2. the rest, in time order, between the lines of the calls before and after it: an operator to the previous
   call's line if that line has its operator (``aten::mul`` ↔ ``*``), else the first line between that has it;
   a module's call, a wrapper or a constructor (no name to match) to the first line between that calls
   anything, else the next call's line; a ``with``'s ``__enter__`` / ``__exit__`` and a loop's ``__next__`` to
   the ``with`` or ``for`` line between, else the last one before.

A line found so is ``exact``; a call whose file cannot be read, or that matched nothing, keeps its frame's line
(the function's first line) and function. Each run of a function with the same calls is matched once (a
training step repeats).
"""

from __future__ import annotations

import ast
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd

from tracer.analysis.source import Attribution, parse_frame
from tracer.timeline import KINDS

#: A source file read for its lines at most this large (a generated file of megabytes is nobody's loop).
MAX_SOURCE_BYTES = 4 * 1024 * 1024

#: What a child of a user frame asks of a line: ("name", words) a call of one of the words; ("op", tokens) an
#: operator; ("call",) any call; ("with",) a ``with`` statement; ("for",) a ``for`` loop's head.
Want = tuple[str, frozenset[str]]

#: Library functions that say nothing of what the user's line called (a decorator's wrapper, a module's call).
_ANONYMOUS = frozenset(("wrapper", "inner", "_fn", "decorate_context", "__call__", "_call_impl",
                        "_wrapped_call_impl", "__init__", "__new__", "forward", "_no_grad_wrapper", "wrapped",
                        "decorator", "fn", "func", "<lambda>", "<genexpr>", "<listcomp>", "<dictcomp>",
                        "<setcomp>", "_method", "__torch_function__"))
#: aten operator (in-place ``_`` dropped) → the Python syntax that runs it.
_OP_SYNTAX: dict[str, frozenset[str]] = {
    **{k: frozenset(("Mult",)) for k in ("mul", "multiply")},
    **{k: frozenset(("Add",)) for k in ("add",)},
    **{k: frozenset(("Sub",)) for k in ("sub", "rsub", "subtract")},
    **{k: frozenset(("Div", "FloorDiv")) for k in ("div", "true_divide", "divide")},
    "floor_divide": frozenset(("FloorDiv",)), "remainder": frozenset(("Mod",)), "fmod": frozenset(("Mod",)),
    "pow": frozenset(("Pow",)), "neg": frozenset(("USub",)), "bitwise_not": frozenset(("Invert", "Not")),
    "bitwise_and": frozenset(("BitAnd",)), "bitwise_or": frozenset(("BitOr",)), "bitwise_xor": frozenset(("BitXor",)),
    "__and__": frozenset(("BitAnd",)), "__or__": frozenset(("BitOr",)), "__xor__": frozenset(("BitXor",)),
    **{k: frozenset(("MatMult",)) for k in ("matmul", "mm", "bmm", "mv", "dot")},
    **{k: frozenset(("Compare",)) for k in ("eq", "ne", "lt", "le", "gt", "ge")},
    **{k: frozenset(("Subscript",)) for k in ("slice", "select", "index", "index_put", "unsqueeze", "as_strided",
                                             "masked_fill", "copy", "fill", "index_select", "masked_select")},
}
_NAMED = {"torch/optim/optimizer.py": {"wrapper": "step"}}


def want_of(kind: str, name: str) -> Want:
    """What line a child of a user frame needs: from its kind (a ``python`` frame, or a host call) and name."""
    if kind != "python":
        op = name.removeprefix("aten::").removesuffix("_")
        syntax = _OP_SYNTAX.get(op)
        return ("op", syntax) if syntax else ("call", frozenset())
    if name.startswith("<built-in "):
        # <built-in method item of Tensor object at 0x…>, <built-in function print>
        word = name.split(" ", 3)[2] if name.count(" ") >= 2 else ""
        word = word.rstrip(">")
        if word in ("__enter__", "__exit__"):
            return ("with", frozenset())
        return ("name", frozenset((word,))) if word else ("call", frozenset())
    parsed = parse_frame(name)
    if parsed is None:
        return ("call", frozenset())  # (nn.Module: Linear_0, a module's call: no name to match)
    file, _line, func = parsed
    func = next((v for k, m in _NAMED.items() if file.endswith(k) for f, v in m.items() if f == func), func)
    if func in ("__enter__", "__exit__", "__aenter__", "__aexit__"):
        return ("with", frozenset())
    if func in ("__iter__", "__next__", "_next_data"):
        return ("for", frozenset())
    if func in ("__getitem__", "__setitem__"):
        return ("op", frozenset(("Subscript",)))
    if func in _ANONYMOUS or func.startswith("<"):
        return ("call", frozenset())
    return ("name", frozenset((func,)))


@dataclass(frozen=True)
class LineInfo:
    """One line of a scope: the names it calls, the operators it has, whether it opens a ``with`` or a ``for``,
    whether it is in a loop of its scope, and its text."""

    words: frozenset[str]
    ops: frozenset[str]
    calls: bool
    with_: bool
    for_: bool
    in_loop: bool
    text: str


@dataclass(frozen=True)
class Scope:
    """A function (or the module) of a file: its name, its first line (decorators included), its def line, its
    last line, and its own lines (a nested function's are its own)."""

    name: str
    first: int
    def_line: int
    last: int
    lines: dict[int, LineInfo]
    order: tuple[int, ...] = ()


@dataclass
class _Line:
    """A line's facts while its scope is read."""

    in_loop: bool
    words: set[str] = field(default_factory=set)
    ops: set[str] = field(default_factory=set)
    calls: bool = False
    with_: bool = False
    for_: bool = False


class _Collector(ast.NodeVisitor):
    """The lines of one scope (nested functions and classes are collected as their own scopes)."""

    def __init__(self, source_lines: list[str], scopes: list[Scope]) -> None:
        self.src = source_lines
        self.scopes = scopes
        self.lines: dict[int, _Line] = {}
        self.loop = 0

    def _line(self, n: int) -> _Line:
        got = self.lines.get(n)
        if got is None:
            got = self.lines[n] = _Line(self.loop > 0)
        return got

    def _scope(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
        scopes_of(node.body, node.name, first, node.lineno, node.end_lineno or node.lineno, self.src, self.scopes)
        # decorators and defaults run in the enclosing scope
        for d in [*node.decorator_list, *node.args.defaults, *(k for k in node.args.kw_defaults if k)]:
            self.visit(d)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self._scope(node)

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> None:
        self._scope(node)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for stmt in node.body:
            self.visit(stmt)

    def visit_Lambda(self, node: ast.Lambda) -> None:
        return  # (a lambda's body runs as its own frame, <lambda>)

    def visit_Call(self, node: ast.Call) -> None:
        info = self._line(node.lineno)
        info.calls = True
        f = node.func
        if isinstance(f, ast.Attribute):
            info.words.add(f.attr)
        elif isinstance(f, ast.Name):
            info.words.add(f.id)
        self.generic_visit(node)

    def visit_BinOp(self, node: ast.BinOp) -> None:
        self._line(node.lineno).ops.add(type(node.op).__name__)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._line(node.lineno).ops.add(type(node.op).__name__)
        self.generic_visit(node)

    def visit_UnaryOp(self, node: ast.UnaryOp) -> None:
        self._line(node.lineno).ops.add(type(node.op).__name__)
        self.generic_visit(node)

    def visit_Compare(self, node: ast.Compare) -> None:
        self._line(node.lineno).ops.add("Compare")
        self.generic_visit(node)

    def visit_Subscript(self, node: ast.Subscript) -> None:
        self._line(node.lineno).ops.add("Subscript")
        self.generic_visit(node)

    def _with(self, node: ast.With | ast.AsyncWith) -> None:
        self._line(node.lineno).with_ = True
        self.generic_visit(node)

    def visit_With(self, node: ast.With) -> None:
        self._with(node)

    def visit_AsyncWith(self, node: ast.AsyncWith) -> None:
        self._with(node)

    def _loop(self, node: ast.For | ast.AsyncFor | ast.While) -> None:
        head = self._line(node.lineno)
        if not isinstance(node, ast.While):
            head.for_ = True
            self.visit(node.iter)
        else:
            self.visit(node.test)
        self.loop += 1
        for stmt in node.body:
            self.visit(stmt)
        self.loop -= 1
        for stmt in node.orelse:
            self.visit(stmt)

    def visit_For(self, node: ast.For) -> None:
        self._loop(node)

    def visit_AsyncFor(self, node: ast.AsyncFor) -> None:
        self._loop(node)

    def visit_While(self, node: ast.While) -> None:
        self._loop(node)

    def visit_comprehension(self, node: ast.comprehension) -> None:
        self.loop += 1
        self.generic_visit(node)
        self.loop -= 1


def scopes_of(body: Sequence[ast.stmt], name: str, first: int, def_line: int, last: int, src: list[str],
              scopes: list[Scope]) -> None:
    """Collect the scope of ``body`` (and, through the collector, the scopes nested in it) into ``scopes``."""
    c = _Collector(src, scopes)
    for stmt in body:
        c.visit(stmt)
    lines = {n: LineInfo(frozenset(v.words), frozenset(v.ops), v.calls, v.with_, v.for_, v.in_loop,
                         src[n - 1].strip() if 0 < n <= len(src) else "")
             for n, v in c.lines.items()}
    scopes.append(Scope(name, first, def_line, last, lines, tuple(sorted(lines))))


@dataclass
class SourceIndex:
    """One source file: its scopes (the module's first) and its text."""

    path: Path
    text: list[str]
    scopes: list[Scope]

    @classmethod
    def parse(cls, path: Path, text: str) -> SourceIndex | None:
        try:
            tree = ast.parse(text, filename=str(path))
        except (SyntaxError, ValueError):
            return None
        src = text.splitlines()
        scopes: list[Scope] = []
        scopes_of(tree.body, "<module>", 1, 0, max(len(src), 1), src, scopes)
        scopes.insert(0, scopes.pop())  # (the module's was collected last)
        return cls(path, src, scopes)

    def scope_of(self, line: int, func: str) -> Scope | None:
        """The scope a frame ``FILE(line): func`` ran in: the module for ``<module>``; else the function of that
        name whose first line it is, or the innermost of that name holding the line (a frame the profiler found
        already running names the line it was at), else None."""
        if func == "<module>":
            return self.scopes[0]
        named = [s for s in self.scopes[1:] if s.name == func]
        for s in named:
            if line in (s.first, s.def_line):
                return s
        holding = [s for s in named if s.first <= line <= s.last]
        return min(holding, key=lambda s: s.last - s.first) if holding else None

    def line_text(self, line: int) -> str:
        return self.text[line - 1].strip() if 0 < line <= len(self.text) else ""


def short_names(files: Iterable[str]) -> dict[str, str]:
    """How each file is shown in a table: an absolute path without the folders all absolute paths given share
    (nsys names a script by its absolute path on the machine that ran it: ``/job/repo/tests/train.py`` alone is
    ``train.py``), keeping at least the file's name; a relative path (torch.profiler's) as it is."""
    names = [f for f in dict.fromkeys(files) if f]
    absolute = [f for f in names if os.path.isabs(f)]
    out = {f: f for f in names}
    if absolute:
        common = os.path.commonpath([os.path.dirname(f) for f in absolute])
        for f in absolute:
            out[f] = os.path.relpath(f, common) if common not in ("", os.sep) else f
    return out


def candidates(file: Path, roots: Sequence[Path]) -> list[Path]:
    """Where a frame's ``file`` may be, in order: a relative path under each root; an absolute one as it is, then
    (a trace recorded on another machine: nsys names the script by its absolute path there) its trailing parts
    under each root, the longest first (``/job/repo/tests/train.py`` → ``ROOT/job/repo/tests/train.py`` …
    ``ROOT/train.py``). The same list whether the absolute path exists or not: a reader confined to its roots
    then tells nothing of files outside them."""
    if not file.is_absolute():
        return [r / file for r in roots]
    parts = file.parts[1:]
    return [file, *(r / Path(*parts[k:]) for k in range(len(parts)) for r in roots)]


@dataclass
class SourceFiles:
    """Where the user's files are looked for (:func:`candidates`): a frame's absolute path as it is, else its
    trailing parts; a relative one under each of ``roots`` in turn (``--source-root``, the trace's folder, the
    run's working directory). Each file is read and parsed once; one that cannot be (absent, too large, not
    Python) is None."""

    roots: list[Path]
    _index: dict[str, SourceIndex | None] = field(default_factory=dict)

    def find(self, file: str) -> Path | None:
        for c in candidates(Path(os.path.expanduser(file)), self.roots):
            try:
                if c.is_file():
                    return c
            except OSError:
                continue
        return None

    def index(self, file: str) -> SourceIndex | None:
        if file in self._index:
            return self._index[file]
        got: SourceIndex | None = None
        path = self.find(file)
        if path is not None:
            try:
                if path.stat().st_size <= MAX_SOURCE_BYTES:
                    got = SourceIndex.parse(path, path.read_text(encoding="utf-8", errors="replace"))
            except OSError:
                got = None
        self._index[file] = got
        return got


def resolve(scope: Scope, wants: Sequence[Want], at: int = 0) -> list[int | None]:
    """The line of ``scope`` each of a run's children (in time order) came from (module docstring); None where
    no line of the scope can make it. ``at``: the line the run was at when the trace began (a frame the profiler
    found running), where the matching starts; 0 for a run the trace saw begin."""
    lines, order = scope.lines, scope.order
    out: list[int | None] = [None] * len(wants)
    # 1. named calls, in order, a loop going back
    prev = at or scope.def_line
    for i, (kind, words) in enumerate(wants):
        if kind != "name":
            continue
        cands = [n for n in order if lines[n].words & words]
        if cands:
            pick = next((n for n in cands if n >= prev), cands[0])
            out[i] = prev = pick
    # 2. the rest, between the named calls around them
    for i, (kind, words) in enumerate(wants):
        if out[i] is not None:
            continue
        lo = next((out[j] for j in range(i - 1, -1, -1) if out[j] is not None), None)
        hi = next((out[j] for j in range(i + 1, len(wants)) if out[j] is not None), None)
        a = (at - 1 if at else scope.def_line) if lo is None else lo  # (a running line is still running)
        b = scope.last + 1 if hi is None else hi

        def fits(n: int, kind: str = kind, words: frozenset[str] = words) -> bool:
            info = lines[n]
            if kind == "op":
                return bool(info.ops & words)
            if kind == "with":
                return info.with_
            if kind == "for":
                return info.for_
            return info.calls

        between = [n for n in order if (a < n < b if a <= b else (n > a or n < b)) and fits(n)]
        if kind == "op" and lo is not None and lo in lines and fits(lo):
            out[i] = lo
        elif between:
            out[i] = between[0]
        elif hi is not None and hi in lines and fits(hi):
            out[i] = hi
        elif lo is not None and lo in lines and fits(lo):
            out[i] = lo
        elif kind in ("with", "for"):
            # (a with's __exit__, a for's next item: back up to the head that opened the block)
            out[i] = next((n for n in reversed(order) if n <= a and fits(n)), None)
    return out


@dataclass(frozen=True)
class Sites:
    """Where each host call came from in the user's code (index: the call's timeline row): ``file``, ``line``,
    ``function``, ``exact`` (the line read from the source; else the frame's own line: the function's first),
    ``text`` (the line's text, "" unread), ``in_loop`` (the line is in a loop of its function), ``frame`` (the
    user frame's row); and for each user frame that has a parent (``callers``, index: its row): the same
    columns for the line of the parent that called it. ``read``: the files read, ``unread``: those not found."""

    calls: pd.DataFrame
    callers: pd.DataFrame
    read: tuple[str, ...]
    unread: tuple[str, ...]


SITE_COLUMNS = ("file", "line", "function", "exact", "text", "in_loop", "frame")


def sites(attribution: Attribution, events: pd.DataFrame, files: SourceFiles | None,
          current_lines: bool = False) -> Sites:
    """The line each attributed call came from (:class:`Sites`), read from the user's source through ``files``
    (None: no file is read; every line is its frame's). ``current_lines``: the frames name the line each was at
    (Nsight Systems' backtraces, :mod:`tracer.parsers.nsys_stacks`), which is then the call's exact line where
    the file can be read (its text and loop read from it); else the function's first (torch.profiler's)."""
    calls, frames = attribution.calls, attribution.frames
    # a run's children: each call's entry, and each user frame's entry into its parent
    kids = pd.concat([
        pd.DataFrame({"frame": calls["frame"].to_numpy(np.int64), "entry": calls["entry"].to_numpy(np.int64)}),
        pd.DataFrame({"frame": frames["parent"].to_numpy(np.int64), "entry": frames["entry"].to_numpy(np.int64)}),
    ], ignore_index=True)
    kids = kids[((kids["frame"] >= 0) & (kids["entry"] >= 0) & (kids["entry"] != kids["frame"])).to_numpy()]
    kids = kids.drop_duplicates()
    found: list[tuple[int, int, int, bool]] = []  # (frame, entry, line, in a loop)
    read: set[str] = set()
    unread: set[str] = set()
    if files is not None and len(kids):
        at_pos = _pos(events, kids["entry"].to_numpy(np.int64))
        name_codes = events["name"].cat.codes.to_numpy()[at_pos]
        categories = events["name"].cat.categories
        kind_codes = events["kind"].cat.codes.to_numpy()[at_pos]
        order = np.lexsort((kids["entry"].to_numpy(np.int64), events["start_ns"].to_numpy(np.int64)[at_pos],
                            kids["frame"].to_numpy(np.int64)))
        k_frame = kids["frame"].to_numpy(np.int64)[order]
        k_entry = kids["entry"].to_numpy(np.int64)[order].tolist()
        k_want = [_want_cached(int(k), str(categories[c]) if c >= 0 else "")
                  for k, c in zip(kind_codes[order].tolist(), name_codes[order].tolist(), strict=True)]
        f_file = dict(zip(frames.index.tolist(), frames["file"].tolist(), strict=True))
        f_line = dict(zip(frames.index.tolist(), frames["line"].tolist(), strict=True))
        f_func = dict(zip(frames.index.tolist(), frames["function"].tolist(), strict=True))
        bounds = np.flatnonzero(np.diff(k_frame)) + 1
        memo: dict[tuple[str, int, int, tuple[Want, ...]], list[int | None]] = {}
        for lo, hi in zip(np.r_[0, bounds].tolist(), np.r_[bounds, k_frame.size].tolist(), strict=True):
            frame = int(k_frame[lo])
            file, line = str(f_file[frame]), int(f_line[frame])
            index = files.index(file)
            if index is None:
                unread.add(file)
                continue
            read.add(file)
            scope = index.scope_of(line, str(f_func[frame]))
            if scope is None:
                continue
            if current_lines:
                loop = scope.lines[line].in_loop if line in scope.lines else False
                found += [(frame, e, line, loop) for e in k_entry[lo:hi]]
                continue
            wants = tuple(k_want[lo:hi])
            # (a frame the profiler found running names the line it was at: the run resumes there)
            at = 0 if line in (scope.first, scope.def_line) or (scope.name == "<module>" and line == 1) else line
            key = (file, scope.first, at, wants)
            got = memo.get(key)
            if got is None:
                got = memo[key] = resolve(scope, wants, at)
            found += [(frame, e, n, scope.lines[n].in_loop) for e, n in zip(k_entry[lo:hi], got, strict=True)
                      if n is not None]
    hits = pd.DataFrame(found, columns=["frame", "entry", "_line", "_loop"]).astype(
        {"frame": np.int64, "entry": np.int64, "_line": np.int64, "_loop": bool})
    indexes = {} if files is None else files._index

    def table(frame: np.ndarray, entry: np.ndarray, index: pd.Index) -> pd.DataFrame:
        f = frames.loc[frame]
        got = pd.DataFrame({"frame": frame, "entry": entry}).merge(hits, on=["frame", "entry"], how="left")
        exact = got["_line"].notna().to_numpy()
        line = np.where(exact, got["_line"].fillna(0).to_numpy(np.int64), f["line"].to_numpy(np.int64))
        file = f["file"].to_numpy(dtype=object)
        # the text of each distinct (file, line)
        pairs = pd.DataFrame({"file": file, "line": line})
        distinct = pairs.drop_duplicates()
        text_of = {(fl, n): (ix.line_text(n) if (ix := indexes.get(fl)) is not None else "")
                   for fl, n in zip(distinct["file"].tolist(), distinct["line"].tolist(), strict=True)}
        text = [text_of[k] for k in zip(file.tolist(), line.tolist(), strict=True)]
        return pd.DataFrame({"file": file, "line": line, "function": f["function"].to_numpy(dtype=object),
                             "exact": exact, "text": text,
                             "in_loop": got["_loop"].fillna(False).to_numpy(bool),
                             "frame": frame.astype(np.int64)}, index=index)

    call_sites = table(calls["frame"].to_numpy(np.int64), calls["entry"].to_numpy(np.int64), calls.index)
    has_parent = frames[frames["parent"] >= 0]
    callers = table(has_parent["parent"].to_numpy(np.int64), has_parent["entry"].to_numpy(np.int64),
                    has_parent.index)
    return Sites(call_sites, callers, tuple(sorted(read)), tuple(sorted(unread)))


@lru_cache(maxsize=65536)
def _want_cached(kind: int, name: str) -> Want:
    return want_of(KINDS[kind], name)


def _pos(events: pd.DataFrame, labels: np.ndarray) -> np.ndarray:
    """Positions of index ``labels`` in ``events`` (a RangeIndex: the labels themselves)."""
    index = events.index
    if isinstance(index, pd.RangeIndex) and index.start == 0 and index.step == 1:
        return labels
    return np.asarray(index.get_indexer(labels), dtype=np.int64)


def chain_of(sites_: Sites, attribution: Attribution, row: int) -> list[tuple[str, int, str]]:
    """The user frames above call ``row``'s, outwards: (file, line that called the next frame in, function)."""
    out: list[tuple[str, int, str]] = []
    if row not in sites_.calls.index:
        return out
    frame = int(sites_.calls.at[row, "frame"])
    callers = sites_.callers
    for f in attribution.chain(frame)[:-1]:
        if f in callers.index:
            c = callers.loc[f]
            out.append((str(c["file"]), int(c["line"]), str(c["function"])))
    return out
