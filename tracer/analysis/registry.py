"""The registry of analyses: what `tracer summary` (text and --json), run directories' summary.json and the
dashboard all loop over.

An :class:`Analysis` is a name, a title, ``compute(timeline) -> result`` (a typed result, e.g. a frozen
dataclass of :mod:`tracer.analysis.results`), how the result is written into the summary's JSON and read back,
and, optionally, how it reads as text: a list of :class:`Table` / :class:`Line` blocks, plain data that the CLI
turns into Rich tables (and that any other front end may render its own way). Nothing here prints or imports a
UI library.

Registration order is the order of the summary's JSON keys; ``text_order`` the order of the text. docs/analyses.md
says how to add one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tracer.analysis.summary import Summary
    from tracer.timeline import Timeline


# ---------------------------------------------------------------------------------------------------- text blocks


@dataclass(frozen=True)
class Column:
    """A column of a :class:`Table`."""

    header: str
    #: "left" or "right"
    justify: str = "right"
    #: never wrap its cells (the table cuts or overflows instead)
    no_wrap: bool = False
    #: the column that gives way on a narrow terminal: its cells are broken after separators (``/ - _ . + :``)
    #: to fit the width the other columns leave (at most one per table)
    fit: bool = False
    #: with ``fit``: cut its cells to that width with an ellipsis instead of breaking them onto more lines
    cut: bool = False


@dataclass(frozen=True)
class Table:
    """A table of text cells, already formatted (times in ms, counts with separators)."""

    title: str | None
    columns: tuple[Column, ...]
    rows: tuple[tuple[str, ...], ...]
    caption: str | None = None


@dataclass(frozen=True)
class Line:
    """One line of text, in parts of (text, style); a style is a Rich style name ("bold", "dim", "yellow") or ""."""

    parts: tuple[tuple[str, str], ...]

    @classmethod
    def of(cls, text: str, style: str = "") -> Line:
        return cls(((text, style),))

    @property
    def text(self) -> str:
        return "".join(t for t, _ in self.parts)


Block = Table | Line


@dataclass(frozen=True)
class TextOptions:
    """What a reader of the text asked for."""

    #: ranges listed before "N more ranges in --json"
    max_ranges: int = 12
    #: collectives listed (by start skew) before "N more in --json"; -1: all
    max_collectives: int = 10
    #: (rank, ns) each rank's clock was moved by before the figures were made (``summary --clock-fix``; empty:
    #: it moved none); None: no fix was asked for
    clock_moved_ns: tuple[tuple[int, int], ...] | None = None


# ---------------------------------------------------------------------------------------------------- analyses


@dataclass(frozen=True)
class Analysis:
    """One analysis of a timeline, as the summary runs it."""

    #: its key in :class:`~tracer.analysis.summary.Summary` (``summary.part(name)``)
    name: str
    #: what it answers, for people
    title: str
    #: the timeline -> its typed result (pure: no printing, no I/O)
    compute: Callable[[Timeline], Any]
    #: the result -> the top-level keys it adds to the summary's JSON, in order ({} for none); the summary is
    #: passed for what labels need (``summary.multi_rank``)
    to_json: Callable[[Any, Summary], dict[str, Any]]
    #: the summary's JSON -> the result (the inverse of ``to_json``; keys it does not find read as empty)
    from_json: Callable[[Mapping[str, Any]], Any]
    #: the keys ``to_json`` may write (so that one key of the JSON can be answered by computing only its part)
    json_keys: tuple[str, ...]
    #: the result -> text blocks for ``tracer summary`` (None: not in the text)
    blocks: Callable[[Any, Summary, TextOptions], list[Block]] | None = None
    #: where its blocks go in the text, ascending
    text_order: int = 100
    #: computed only when asked for (its cost is not worth paying where it is not shown: the dashboard's runs
    #: table), not when the summary is made
    lazy: bool = False
    #: a job's summary without the job in one frame (:mod:`tracer.analysis.ranked`): ``per_rank(timeline of one
    #: rank) -> part`` runs where that rank was read (a worker), and ``combine(parts in rank order, job)`` makes
    #: the result from them, equal to ``compute`` over the ranks' timelines concatenated. ``job`` holds the
    #: job's meta and no rows (what an analysis of the meta alone reads; its ``per_rank`` is then None). An
    #: analysis without ``combine`` makes a job's summary read the whole job into one frame.
    per_rank: Callable[[Timeline], Any] | None = None
    combine: Callable[[list[Any], Timeline], Any] | None = None


def stack_parts(parts: list[list[Any]], _job: Timeline) -> list[Any]:
    """Per-rank rows (each rank's sorted by a key that starts with the rank) as the job's: one after another."""
    return [row for part in parts for row in part]


_REGISTRY: dict[str, Analysis] = {}
_KEY_OWNER: dict[str, str] = {}


def register(analysis: Analysis) -> Analysis:
    """Add ``analysis`` to the summary (after those registered before it). Names and JSON keys are unique."""
    if analysis.name in _REGISTRY:
        raise ValueError(f"an analysis named {analysis.name!r} is registered already")
    taken = [k for k in analysis.json_keys if k in _KEY_OWNER]
    if taken:
        raise ValueError(f"JSON keys {taken} of {analysis.name!r} belong to {[_KEY_OWNER[k] for k in taken]}")
    _REGISTRY[analysis.name] = analysis
    for key in analysis.json_keys:
        _KEY_OWNER[key] = analysis.name
    return analysis


def unregister(name: str) -> None:
    """Remove an analysis (tests register their own and take it away again)."""
    analysis = _REGISTRY.pop(name)
    for key in analysis.json_keys:
        _KEY_OWNER.pop(key, None)


def analyses() -> list[Analysis]:
    """Every registered analysis, in registration (JSON) order."""
    return list(_REGISTRY.values())


def get(name: str) -> Analysis:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise KeyError(f"no analysis named {name!r}; registered: {', '.join(_REGISTRY)}") from None


def owner_of(key: str) -> Analysis | None:
    """The analysis that writes a top-level JSON key, if any."""
    name = _KEY_OWNER.get(key)
    return _REGISTRY[name] if name is not None else None


def text_analyses() -> list[Analysis]:
    """The analyses that have text, in text order (registration order between equals)."""
    return sorted((a for a in _REGISTRY.values() if a.blocks is not None), key=lambda a: a.text_order)
