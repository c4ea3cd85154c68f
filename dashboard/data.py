"""The dashboard's data-access layer: the only module that touches disk.

A :class:`RunStore` finds runs (bundled examples, ``./runs``, paths given on the command line, uploads),
parses them on demand through :func:`tracer.parsers.load_trace`, each in a child process with a time and a memory
budget (:mod:`tracer.dashboard.parsing`), and keeps the parsed timelines and their drawing layout
(:class:`tracer.dashboard.model.TimelineView`) in a small server-side LRU cache keyed by run. The browser only
ever receives what a figure of the current window needs.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import math
import re
import shutil
import sys
import tempfile
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, NamedTuple, TypeGuard

import orjson

import tracer
from tracer.dashboard.model import TimelineView, prepare
from tracer.dashboard.parsing import ParseBusyError, Parsed, ParseLimits, Parser, summary_of
from tracer.errors import InputNotFoundError, TraceFormatError, TracerError, UsageError
from tracer.files import rundir
from tracer.files.discover import discover, is_run_dir, job_label
from tracer.files.formats import GZIP_MAGIC, not_a_regular_file, stem
from tracer.files.rundir import RunMeta, as_run_meta
from tracer.job.store import is_large_job
from tracer.parsers import GZIP_RATIO_FLOOR, iter_inflated, load_trace
from tracer.timeline import CLOCK_UNIX, Timeline

#: Traces up to this size are parsed for the runs table when they have no summary.json beside them.
LIST_PARSE_MAX_BYTES = 32 * 1024 * 1024
#: Uploads above this are refused (open big traces with ``tracer dashboard PATH`` instead).
DEFAULT_MAX_UPLOAD_BYTES = 200 * 1000 * 1000  # decimal MB, as --max-upload-mb and every message say
#: Uploads kept at once; beyond it (or beyond :data:`KEPT_UPLOAD_FACTOR` largest uploads' worth of bytes) the
#: oldest are removed, from disk and from the runs list: without a bound a long-lived server fills /tmp.
DEFAULT_MAX_UPLOADS = 20
KEPT_UPLOAD_FACTOR = 5
#: Upload file names are cut to this many characters (a 300-character name is ENAMETOOLONG on most disks).
MAX_UPLOAD_NAME = 100
#: Run keys and names quoted in messages are cut to this many characters: a request may send anything.
MAX_QUOTED = 60
#: A request naming an unknown run looks through the folders again at most this often (seconds): a run recorded
#: while the dashboard runs opens at its address, and a flood of unknown names costs at most one scan a second.
RESCAN_INTERVAL_S = 1.0
#: The start of every upload's key (``/timeline?run=upload-NAME``): an unknown key with it was an upload.
UPLOAD_PREFIX = "upload-"


def request_limit_bytes(max_upload_bytes: int) -> int:
    """The longest HTTP request the server reads: an upload arrives base64-encoded (4/3 of the file) inside
    Dash's JSON, with its name and a little wrapping."""
    return max_upload_bytes * 4 // 3 + 1024 * 1024


def bundled_examples_dir() -> Path:
    """Where ``tracer`` keeps its bundled example runs (may not exist)."""
    return Path(tracer.__file__).parent / "examples"


@dataclass
class RunInfo:
    """A run the dashboard can show: where it is and what is known without parsing it."""

    key: str  # URL-safe, unique within the store
    path: Path
    name: str
    origin: str  # "example", "runs", "path" or "upload"
    meta: dict[str, Any] = field(default_factory=dict)  # meta.json of a run directory, as read
    summary: dict[str, Any] | None = None  # summary.json, or computed once parsed
    error: str | None = None  # why it could not be summarised, if it could not
    #: the rank traces of a job given as such (``tracer dashboard --job``), read as one timeline; ``path`` is then
    #: the folder they share
    job_files: tuple[Path, ...] = ()
    #: meta.json typed (read once, here): what the pages show of it
    run_meta: RunMeta = field(init=False, repr=False)
    #: when the trace's first event happened (Unix ns, :func:`trace_time_ns`), once it has been read
    trace_ns: int | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.run_meta = RunMeta.from_dict(self.meta)

    @property
    def is_run_dir(self) -> bool:
        return self.path.is_dir() and not self.job_files

    @property
    def size(self) -> int:
        """Bytes of what is parsed to show it: the trace, the run's top-level files, or the job's traces."""
        return sum(_size(f) for f in self.job_files) if self.job_files else _size(self.path)


def _stem(p: Path) -> str:
    # the format's suffixes (tracer.files.formats), then the one tensorboard_trace_handler adds: host_pid.pt.trace.json
    return stem(p.name).removesuffix(".pt.trace").removesuffix(".pt.trace") or p.name


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-") or "run"


def quoted(text: Any, limit: int = MAX_QUOTED) -> str:
    """``text`` for a one-line message, cut to ``limit`` characters: what a request sends may be 100 kB
    long, and hold line breaks."""
    s = " ".join(str(text).split())
    return s if len(s) <= limit else s[: limit - 1] + "…"


def upload_filename(name: str) -> str:
    """A file name safe to write for an uploaded ``name``: no path, no leading dots (``..`` is the folder
    above), not empty, at most :data:`MAX_UPLOAD_NAME` characters with its suffixes kept (nsys reports are
    told by their suffix)."""
    slug = _slug(name).lstrip(".-") or "upload"
    if len(slug) <= MAX_UPLOAD_NAME:
        return slug
    suffix = "".join(Path(slug).suffixes[-2:])[-20:]
    return slug[: MAX_UPLOAD_NAME - len(suffix)] + suffix


class UploadResult(NamedTuple):
    """What :meth:`RunStore.add_upload` did: the run registered, and the older uploads removed for it."""

    info: RunInfo
    evicted: list[str]  # names of the uploads removed to stay within the bound, oldest first


def _read_json(p: Path) -> dict[str, Any]:
    if not_a_regular_file(p) is not None:  # (a pipe's read would block the server until a writer comes)
        return {}
    try:
        data = orjson.loads(p.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


class RunStore:
    """Runs by key, with a server-side cache of parsed timelines and their drawing layout.

    Thread-safe: Dash serves callbacks from several threads, and two requests for the same big run must not
    parse it twice. No lock of the store is held while a trace is parsed: other runs are served meanwhile.

    Every parse runs in a child process under ``parse_limits`` (None: :meth:`ParseLimits.from_env`); with
    ``isolate=False`` in this process instead, without limits (a test that patches the parser).
    """

    def __init__(
        self,
        paths: list[Path] | tuple[Path, ...] = (),
        *,
        examples: bool = True,
        runs_dir: Path | None = Path("runs"),
        cache_size: int = 6,
        max_upload_bytes: int = DEFAULT_MAX_UPLOAD_BYTES,
        upload_dir: Path | None = None,
        max_uploads: int = DEFAULT_MAX_UPLOADS,
        max_kept_upload_bytes: int | None = None,
        jobs: list[list[Path]] | tuple[list[Path], ...] = (),
        parse_limits: ParseLimits | None = None,
        isolate: bool = True,
    ) -> None:
        self.paths = [Path(p) for p in paths]
        #: each the rank traces of one job, listed as one run (``tracer dashboard --job``)
        self.jobs = [[Path(p) for p in job] for job in jobs]
        self.examples = examples
        self.runs_dir = runs_dir
        self.cache_size = cache_size
        self.max_upload_bytes = max_upload_bytes
        self.max_uploads = max(1, max_uploads)
        self.max_kept_upload_bytes = max_kept_upload_bytes or KEPT_UPLOAD_FACTOR * max_upload_bytes
        self._upload_dir = upload_dir
        self._own_upload_dir = False  # made here (a temporary folder): close() removes it whole
        #: key -> (file, bytes) of each kept upload, oldest first
        self._uploads: OrderedDict[str, tuple[Path, int]] = OrderedDict()
        self._runs: dict[str, RunInfo] = {}
        self._by_path: dict[Path, str] = {}
        self._views: OrderedDict[str, TimelineView] = OrderedDict()
        self._lock = threading.RLock()
        self._key_locks: dict[str, threading.Lock] = {}
        self._skipped: set[Path] = set()
        self._scan_lock = threading.Lock()  # one rescan at a time (get() of an unknown key)
        self._last_scan = 0.0  # (monotonic seconds of the last scan: refresh() sets it)
        self._parser = Parser(parse_limits or ParseLimits.from_env()) if isolate else None
        self.refresh()

    # ----- discovery
    def refresh(self) -> list[RunInfo]:
        """Look for runs again (new ones appear in ``./runs`` while the app runs); keep known ones."""
        self._last_scan = time.monotonic()
        for job in self.jobs:
            self._register_job(job)
        for origin, root in self._roots():
            for p in discover(root, on_skip=self._say_skipped):
                self._register(p, origin)
        return self.runs()

    def _register_job(self, files: list[Path]) -> RunInfo:
        """One run for the rank traces ``files`` of a job, keyed and named by the folder they share."""
        folder = job_label([f.resolve() for f in files])
        folder = folder if folder.is_dir() else folder.parent
        if folder.name == rundir.TRACES_DIR and is_run_dir(folder.parent):
            folder = folder.parent  # (a recorded job's run: named as the run is)
        with self._lock:
            known = next((i for i in self._runs.values() if i.job_files == tuple(files)), None)
            if known is not None:
                return known
            base = _slug(f"job-{folder.name}")
            key, n = base, 2
            while key in self._runs:
                key, n = f"{base}-{n}", n + 1
            info = RunInfo(key, folder, f"{folder.name} (job of {len(files)} traces)", "path", job_files=tuple(files))
            self._runs[key] = info
            return info

    def _say_skipped(self, path: Path, why: str) -> None:
        """A folder entry named like a trace that cannot be one: said on the server's stderr, once."""
        if path not in self._skipped:
            self._skipped.add(path)
            print(f"tracer: note: {path}: skipped: {why}", file=sys.stderr)

    def _roots(self) -> list[tuple[str, Path]]:
        roots = [("path", p) for p in self.paths]
        if self.examples:
            roots.append(("example", bundled_examples_dir()))
        if self.runs_dir is not None:
            roots.append(("runs", self.runs_dir))
        return roots

    def _register(self, p: Path, origin: str, key_hint: str | None = None) -> RunInfo:
        resolved = p.resolve()
        with self._lock:
            if resolved in self._by_path:
                return self._runs[self._by_path[resolved]]
            base = _slug(key_hint or _stem(p))
            key, n = base, 2
            while key in self._runs:
                key, n = f"{base}-{n}", n + 1
            meta = _read_json(p / rundir.META) if p.is_dir() else {}
            summary = _read_json(p / rundir.SUMMARY) if p.is_dir() else {}
            info = RunInfo(key, p, _stem(p), origin, meta, summary or None)
            self._runs[key] = info
            self._by_path[resolved] = key
            return info

    def runs(self) -> list[RunInfo]:
        with self._lock:
            return list(self._runs.values())

    def get(self, key: str) -> RunInfo:
        """The run ``key``. A key not known yet makes the store look through its folders again (at most once
        every :data:`RESCAN_INTERVAL_S`: requests may name anything, as often as they like), so that a run recorded
        while the dashboard runs opens at its address without a visit to the runs page; :class:`InputNotFoundError`
        when it is still unknown."""
        with self._lock:
            info = self._runs.get(key)
        if info is None and self._rescan():
            with self._lock:
                info = self._runs.get(key)
        if info is None:
            raise InputNotFoundError(quoted(key), self._unknown_why(key))
        return info

    def _rescan(self) -> bool:
        """Look through the folders again (:meth:`refresh`) unless that was done less than
        :data:`RESCAN_INTERVAL_S` ago or is under way in another thread; whether it was done."""
        if time.monotonic() - self._last_scan < RESCAN_INTERVAL_S or not self._scan_lock.acquire(blocking=False):
            return False
        try:
            self.refresh()
        finally:
            self._scan_lock.release()
        return True

    def _unknown_why(self, key: str) -> str:
        """Why ``key`` names no run, in the words that fit it: an upload's key (``upload-...``) is one kept until a
        restart or evicted; any other was not found in the folders the dashboard looks through."""
        if key.startswith(UPLOAD_PREFIX):
            return "no such run in this dashboard (uploaded before a restart, or removed as an old upload?)"
        # (the folders are not named: the page may be served to other machines, and the runs page lists what is there)
        return "no such run in this dashboard: none of that name in the folders it shows (removed or renamed?)"

    @property
    def initial_run(self) -> str | None:
        """The run to open straight away: the only one given on the command line, if exactly one was."""
        if len(self.jobs) == 1 and not self.paths:
            return next(i.key for i in self.runs() if i.job_files == tuple(self.jobs[0]))
        if len(self.paths) != 1 or self.jobs:
            return None
        p = self.paths[0]
        if not (p.is_file() or is_run_dir(p)):
            return None
        key = self._by_path.get(p.resolve())
        return key

    # ----- parsing and caching
    @property
    def parse_limits(self) -> ParseLimits | None:
        """The budgets each parse runs under (None: parsed in this process, unbounded)."""
        return self._parser.limits if self._parser is not None else None

    def _parse(
        self,
        subject: str,
        path: Path,
        *,
        job_files: tuple[Path, ...] = (),
        cache: bool,
        summarize: bool,
        wait: bool = True,
    ) -> Parsed:
        """``path`` (or the job's ``job_files``) parsed, laid out and (with ``summarize``) summarised: in a child
        under the limits, or here."""
        if self._parser is not None:
            return self._parser.parse(
                subject, path, job_files=job_files, cache=cache, summarize=summarize, wait=wait
            )
        if job_files:
            from tracer.job.load import load_job  # (the job's reader: ~30 ms of the app's start, for jobs only)

            timeline = load_job(job_files, cache=cache)
        else:
            timeline = load_trace(path, cache=cache)
        return Parsed(prepare(timeline), summary_of(timeline) if summarize else None)

    def view(self, key: str, *, wait: bool = True) -> TimelineView:
        """The run's drawing layout (parsing the trace on first use; cached, least recently used dropped).

        An unknown key raises :class:`InputNotFoundError` before anything is recorded: keys come from
        requests, and a lock kept per key asked for grew without bound. A run being parsed for another request
        is waited for as long as a parse slot is (:attr:`ParseLimits.wait_s`; not at all without ``wait``), then
        :class:`ParseBusyError`: ten requests for one slow run must not take ten server threads."""
        info = self.get(key)
        with self._lock:
            if key in self._views:
                self._views.move_to_end(key)
                return self._views[key]
            lock = self._key_locks.setdefault(key, threading.Lock())
        if not lock.acquire(timeout=-1 if self._parser is None else (self._parser.limits.wait_s if wait else 0)):
            raise ParseBusyError(str(info.path), "not opened now: it is being parsed for another request; try again "
                                                 "in a moment")
        try:
            with self._lock:
                if key in self._views:
                    return self._views[key]
            # An upload is never cached (its folder is removed whole, and a cache beside it would outlive the
            # upload unseen by the upload bounds); a run or trace of the user's keeps the usual cache.
            if info.job_files and is_large_job(info.job_files):
                # A job too large to read whole is drawn from its store: its ranks are parsed by the job's own
                # worker processes (each bounded), and this process reads each rank's small pack; a JobView holds
                # a lock and its open partitions, so it could not come back from a parse child anyway.
                from tracer.dashboard.job_view import open_job

                view, summary = open_job(info.job_files), None
            else:
                # (summarised where it is parsed, and never under the store's lock: the analyses of a big trace
                # take seconds and memory, and every request, for any run, takes that lock)
                view, summary = self._parse(
                    str(info.path),
                    info.path,
                    job_files=info.job_files,
                    cache=info.origin != "upload",
                    summarize=info.summary is None,
                    wait=wait,
                )
            view.source = Path(info.path)
            if info.summary is None:
                info.summary = summary  # (None for a large job's: not read whole for it)
            info.trace_ns = trace_time_ns(view.timeline) if view.partial is None else None
            with self._lock:
                self._views[key] = view
                while len(self._views) > self.cache_size:
                    self._views.popitem(last=False)
        finally:
            lock.release()
        return view

    def timeline(self, key: str) -> Timeline:
        return self.view(key).timeline

    def summary(
        self, key: str, *, parse_max_bytes: int = LIST_PARSE_MAX_BYTES, parse: bool = True
    ) -> dict[str, Any] | None:
        """The run's summary: stored, cached, or (with ``parse``) computed now if the trace is small enough to
        parse quickly."""
        info = self.get(key)
        if info.summary is not None or info.error is not None:
            return info.summary
        if not parse or info.size > parse_max_bytes:
            return None
        try:
            self.view(key, wait=False)  # (the runs table lists many: it waits for no other request's parse)
        except ParseBusyError:
            return None  # (not the run's fault: the next page load tries again)
        except TracerError as exc:
            info.error = str(exc)
        return info.summary

    # ----- uploads
    def add_upload(self, filename: str, contents: str) -> UploadResult:
        """Store an uploaded trace (a ``data:...;base64,`` string from dcc.Upload), parse it, register it;
        remove the oldest uploads beyond :attr:`max_uploads` or :attr:`max_kept_upload_bytes`.

        Raises :class:`TracerError` with a message meant for the page when the upload is too big or is not
        a trace; nothing is registered or kept on disk then.
        """
        if not isinstance(contents, str) or not isinstance(filename, str):
            raise UsageError("upload", "expected a file's name and contents")
        name = quoted(Path(filename).name or "upload", MAX_UPLOAD_NAME)
        payload = contents.split(",", 1)[1] if contents.startswith("data:") and "," in contents else contents
        # checked before decoding: base64 is 4 characters per 3 bytes
        if len(payload) * 3 // 4 > self.max_upload_bytes + 3:
            raise self._too_big(name, len(payload) * 3 // 4)
        try:
            data = base64.b64decode(payload, validate=False)
        except (binascii.Error, ValueError):
            raise TraceFormatError(name, "the upload could not be decoded") from None
        del payload
        if len(data) > self.max_upload_bytes:
            raise self._too_big(name, len(data))
        if not data:
            raise TraceFormatError(name, "empty file")
        try:
            refuse_bombs(name, data)
        except TracerError as exc:
            raise TraceFormatError(name, exc.problem) from None
        path = self._write_upload(name, data)
        size = len(data)
        del data  # the parser reads the file: holding the bytes too would add their size to the peak
        try:
            view, summary = self._parse(name, path, cache=False, summarize=True)
        except TracerError as exc:
            _remove_upload(path)
            raise TraceFormatError(name, exc.problem) from None
        except Exception as exc:  # noqa: BLE001 - a parser bug must not take the app down: report it as bad input
            _remove_upload(path)
            problem = f"could not be read ({type(exc).__name__}: {quoted(exc, 200)})"
            raise TraceFormatError(name, problem) from None
        view.timeline.meta.source = name
        info = self._register(path, "upload", key_hint=f"{UPLOAD_PREFIX}{quoted(_stem(Path(name)), MAX_QUOTED)}")
        info.name = name
        with self._lock:
            self._views[info.key] = view
            self._views.move_to_end(info.key)
            while len(self._views) > self.cache_size:
                self._views.popitem(last=False)
            self._uploads[info.key] = (path, size)
            self._uploads.move_to_end(info.key)
            evicted = self._evict_uploads(keep=info.key)
        if info.summary is None:
            info.summary = summary
        info.trace_ns = trace_time_ns(view.timeline)
        return UploadResult(info, evicted)

    def _too_big(self, name: str, size: int) -> UsageError:
        return UsageError(
            name,
            f"{_fmt_size(size)} is over the upload limit of {_fmt_size(self.max_upload_bytes)}; "
            f"open it with `tracer dashboard {name}` instead",
        )

    def _write_upload(self, name: str, data: bytes) -> Path:
        """Write the upload to its own folder (named by its content); any failure is a one-line error."""
        folder = self.upload_dir / hashlib.sha1(data).hexdigest()[:12]
        path = folder / upload_filename(name)
        try:
            folder.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        except OSError as exc:
            _remove_upload(path)
            raise UsageError(name, f"cannot store the upload: {exc.strerror or exc}") from None
        return path

    def _evict_uploads(self, keep: str) -> list[str]:
        """Remove the oldest uploads (never ``keep``) until both bounds hold; their names. Holds the lock."""
        evicted: list[str] = []
        while len(self._uploads) > 1 and (
            len(self._uploads) > self.max_uploads
            or sum(n for _, n in self._uploads.values()) > self.max_kept_upload_bytes
        ):
            key = next(k for k in self._uploads if k != keep)
            path, _ = self._uploads.pop(key)
            info = self._runs.pop(key)
            self._by_path.pop(path.resolve(), None)
            self._views.pop(key, None)
            self._key_locks.pop(key, None)
            _remove_upload(path)
            evicted.append(info.name)
        return evicted

    @property
    def upload_dir(self) -> Path:
        if self._upload_dir is None:
            self._upload_dir = Path(tempfile.mkdtemp(prefix="tracer-dashboard-uploads-"))
            self._own_upload_dir = True
        return self._upload_dir

    def close(self) -> None:
        """Stop the parses under way (their child processes are killed) and remove every upload from disk (the
        whole temporary folder, when the store made it). Safe twice; the serving command calls it on every way
        out (Ctrl-C, SIGTERM, exit)."""
        if self._parser is not None:
            self._parser.close()
        with self._lock:
            for key, (path, _) in list(self._uploads.items()):
                _remove_upload(path)
                self._runs.pop(key, None)
                self._views.pop(key, None)
            self._uploads.clear()
            if self._own_upload_dir and self._upload_dir is not None:
                shutil.rmtree(self._upload_dir, ignore_errors=True)
                self._upload_dir, self._own_upload_dir = None, False


def _remove_upload(path: Path) -> None:
    """Remove an upload's file and its folder, if that is now empty (the same trace may be kept under
    another name beside it)."""
    try:
        path.unlink(missing_ok=True)
        path.parent.rmdir()
    except OSError:
        pass


#: How much of a gzip upload :func:`refuse_bombs` inflates: past the floor of the parser's ratio check.
BOMB_CHECK_BYTES = GZIP_RATIO_FLOOR + 8 * 1024 * 1024


def refuse_bombs(name: str, data: bytes) -> None:
    """Inflate the start of a gzip upload and throw it away, so that a decompression bomb is refused (by
    :func:`tracer.parsers.iter_inflated`'s ratio check) holding one block of memory, not the 64 MB the
    parser gathers before the check can trip. Costs a legitimate trace ~0.1 s."""
    if data[:2] != GZIP_MAGIC:
        return
    produced = 0
    for block in iter_inflated(Path(name), data):
        produced += len(block)
        if produced > BOMB_CHECK_BYTES:
            return


def _fmt_size(n: float) -> str:
    return f"{n / 1e6:,.0f} MB" if n >= 1e6 else f"{n / 1e3:,.0f} kB"


def _size(p: Path) -> int:
    try:
        if p.is_dir():
            return sum(f.stat().st_size for f in p.iterdir() if f.is_file())
        return p.stat().st_size
    except OSError:
        return 0


def rank_count(info: RunInfo, summary: dict[str, Any] | None = None) -> int:
    """How many ranks the run holds: a job's run directory's rank traces (``traces/``), else the ranks its
    summary names (a job's timeline stored alone); 1 for a run of one process."""
    if info.job_files:
        return len(info.job_files)
    if info.path.is_dir():
        traces = rundir.find_rank_traces(info.path)
        if traces:
            return len(traces)
    found: set[int] = set()
    for part in ("lanes", "threads"):
        rows = (summary or {}).get(part)
        for row in rows if isinstance(rows, list) else ():
            rank = row.get("rank") if isinstance(row, dict) else None
            if isinstance(rank, int) and not isinstance(rank, bool):
                found.add(rank)
    return max(len(found), 1)


#: Trace times read as Unix time only between these (ns): outside, the clock is not what it says.
_PLAUSIBLE_UNIX_NS = (946_684_800 * 10**9, 7_258_118_400 * 10**9)  # 2000-01-01 .. 2200-01-01


def trace_time_ns(timeline: Timeline) -> int | None:
    """When the trace's first event happened, in Unix ns, where the trace's clock says (Kineto's base time, an
    nsys session's start; a job's ranks aligned on it); None where it does not, or says nonsense."""
    if not len(timeline.events):
        return None
    offset = timeline.meta.clock_offset_ns
    if offset is None:
        if timeline.meta.clock != CLOCK_UNIX:
            return None
        offset = 0
    t = int(timeline.events["start_ns"].min()) + int(offset)
    return t if _PLAUSIBLE_UNIX_NS[0] <= t < _PLAUSIBLE_UNIX_NS[1] else None


#: What :func:`run_date` adds to a date that is only the file's.
FILE_DATE = " (file's date)"


def run_date(info: RunInfo) -> str:
    """When the run was recorded: meta.json's ``created``, else the trace's own time (its first event, once it has
    been read: :attr:`RunInfo.trace_ns`), else when its file was last written, said so: "2026-12-02 15:47",
    "2026-12-02 15:47 (file's date)". UTC throughout."""
    created = info.run_meta.created
    if created:
        return created.replace("T", " ")[:16]
    if info.trace_ns is not None:
        return datetime.fromtimestamp(info.trace_ns / 1e9, tz=timezone.utc).strftime("%Y-%m-%d %H:%M")
    try:
        when = datetime.fromtimestamp(info.path.stat().st_mtime, tz=timezone.utc).strftime("%Y-%m-%d %H:%M")
    except OSError:
        return ""
    return when + FILE_DATE


class RunStatus(NamedTuple):
    """How a recorded command ended, where not well (:func:`run_status`)."""

    kind: str  # "failed" or "interrupted"
    text: str  # "failed (exit 1)", "interrupted (exit 130)"
    title: str  # what it means for the trace, for a tooltip


def run_status(meta: RunMeta | dict[str, Any]) -> RunStatus | None:
    """How the run's command ended, from meta.json's ``exit_code`` and ``interrupted`` (``tracer record --
    COMMAND``): None for a clean exit (0) or a run without a command (a scenario's, a trace alone)."""
    m = as_run_meta(meta)
    code = m.exit_code
    if not m.interrupted and not code:
        return None
    shown = f" (exit {code})" if code is not None else ""
    if m.interrupted or code == 130:
        return RunStatus("interrupted", f"interrupted{shown}",
                         "stopped by Ctrl-C or SIGTERM: the trace holds what ran until then")
    if isinstance(code, int) and code > 128:  # 128 + N: killed by signal N, as a shell says
        return RunStatus("failed", f"killed{shown}", f"the command was killed by signal {code - 128}: the trace "
                         "holds what ran until then")
    return RunStatus("failed", f"failed{shown}", "the command exited with an error: the trace holds what ran "
                     "until then")


def speedups(meta: RunMeta | dict[str, Any]) -> list[tuple[float, str]]:
    """The run's speedups as (value, what it compares): meta.json's ``speedup`` (label "", what other tools
    write), else every ``derived`` figure whose name says speedup, its label taken from the name:
    ``"speedup (single / parallel)"`` -> ``"single / parallel"``, ``"speedup size 64 (one stream / streams)"``
    -> ``"size 64: one stream / streams"``.
    """
    m = as_run_meta(meta)
    if _is_number(m.speedup):
        return [(float(m.speedup), "")]
    return [
        (float(v), _speedup_label(k)) for k, v in m.derived.items() if "speedup" in k.lower() and _is_number(v)
    ]


def _speedup_label(name: str) -> str:
    rest = re.sub(r"(?i)\bspeedup\b", "", name).strip()
    m = re.fullmatch(r"(.*?)\s*\((.*)\)", rest)
    if m:
        what, ratio = m.group(1).strip(" :"), m.group(2).strip()
        return f"{what}: {ratio}" if what else ratio
    return rest.strip(" :")


def speedup_of(meta: RunMeta | dict[str, Any]) -> float | None:
    """The run's (first) speedup: ``meta["speedup"]``, else the first ``derived`` figure named speedup."""
    found = speedups(meta)
    return found[0][0] if found else None


def _is_number(v: Any) -> TypeGuard[float]:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and not math.isnan(v)


#: What each recording mode of ``tracer record`` means (docs/scenarios.md, "Devices").
MODE_MEANING = {
    "multi-gpu": "one lane per GPU",
    "streams": "CUDA streams of one GPU stand in for devices",
    "cpu-threads": "CPU threads stand in for devices",
    "processes": "one process per rank (a lane is a rank)",
}
#: meta.json's ``backend`` -> the profiler's name.
BACKEND_NAMES = {"torch": "torch.profiler", "nsys": "Nsight Systems"}
#: Trace formats (``Timeline.meta.format``) -> what wrote them, for traces without a meta.json.
FORMAT_NAMES = {
    "kineto": "Kineto trace (torch.profiler)",
    "nsys": "Nsight Systems export",
    "parquet": "Parquet timeline",
}
#: Parameters every scenario takes: listed after the scenario's own ones.
COMMON_PARAMS = ("lanes", "seed")


def _fmt_value(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


def command_text(meta: RunMeta | dict[str, Any], limit: int = 80) -> str:
    """A recorded command as a reader would type it (``tracer record -- COMMAND`` runs): programs by their
    base name, cut at ``limit`` characters; "" for a scenario's run."""
    command = as_run_meta(meta).command
    if not command:
        return ""
    words = [Path(command[0]).name, *command[1:]]
    text = " ".join(words)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def what_ran(meta: RunMeta | dict[str, Any]) -> str:
    """The scenario's name, else the recorded command."""
    m = as_run_meta(meta)
    return m.scenario or command_text(m)


def params_text(meta: RunMeta | dict[str, Any]) -> str:
    """The scenario's parameters from meta.json, its own first: ``"n=200 · size=1000 · lanes=2 · seed=0"``
    (``variant`` has its own column and line)."""
    items = [(str(k), v) for k, v in as_run_meta(meta).params.items() if k != "variant"]
    items.sort(key=lambda kv: kv[0] in COMMON_PARAMS)  # stable: the scenario's own order is kept
    return " · ".join(f"{k}={_fmt_value(v)}" for k, v in items)


def variant_text(meta: RunMeta | dict[str, Any]) -> str:
    """``"side-stream"``, or for a run of every variant ``"all (single, parallel)"``."""
    m = as_run_meta(meta)
    if not m.variant:
        return ""
    if m.variant == "all" and m.variants:
        return f"all ({', '.join(map(str, m.variants))})"
    return m.variant


def device_text(meta: RunMeta | dict[str, Any], summary: dict[str, Any] | None = None) -> tuple[str, str]:
    """(device, how it was used): ``("NVIDIA H200", "mode streams: CUDA streams of one GPU stand in for
    devices, 2 lanes")``, ``("CPU", "mode cpu-threads: CPU threads stand in for devices, 4 lanes")``. From
    meta.json, else from the summary (GPU names; no GPU work: CPU); ("", "") when neither says."""
    m = as_run_meta(meta)
    names = m.gpu_names or (summary or {}).get("gpu_names") or {}
    gpus = (
        [str(v) for _, v in sorted(names.items(), key=lambda kv: str(kv[0]))]
        if isinstance(names, dict)
        else []
    )
    if gpus:
        distinct = sorted(set(gpus))
        device = (
            f"{len(gpus)} × {distinct[0]}" if len(gpus) > 1 and len(distinct) == 1 else ", ".join(distinct)
        )
    elif m.mode == "cpu-threads" or (m.devices and set(m.devices) == {"cpu"}):  # ranks on the CPU: cpu, cpu
        device = "CPU"
    elif summary is not None and not summary.get("devices"):
        device = "CPU (no GPU activity in the trace)"
    else:
        device = ""
    how = ""
    if m.mode:
        n = m.lane_count
        how = f"mode {m.mode}"
        if m.mode in MODE_MEANING:
            how += f": {MODE_MEANING[m.mode]}"
        if n is not None:
            how += f", {n} lane{'s' if n != 1 else ''}"
    return device, how


def mode_short(meta: RunMeta | dict[str, Any]) -> str:
    """``"streams · 2 lanes"``: the mode in a few words, for a table cell (its meaning goes in a tooltip)."""
    m = as_run_meta(meta)
    n = m.lane_count
    if not m.mode:
        return ""
    return m.mode + (f" · {n} lane{'s' if n != 1 else ''}" if n is not None else "")


def backend_text(meta: RunMeta | dict[str, Any], fmt: str | None = None) -> str:
    """The profiler that recorded the run (meta.json's backend), else what wrote the trace (its format)."""
    backend = as_run_meta(meta).backend
    if backend:
        return BACKEND_NAMES.get(backend, backend)
    return FORMAT_NAMES.get(str(fmt), str(fmt or ""))
