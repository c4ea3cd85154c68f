"""`tracer export` and the exporter registry: format choice, --force, atomic writes, exit codes."""

from __future__ import annotations

import gzip
import os
import stat
from pathlib import Path

import pytest

from tests.conftest import cli_main, run_cli
from tracer.errors import UsageError
from tracer.exporters import EXPORTERS, export_timeline, format_for_path, get_exporter
from tracer.parsers import load_trace

DATA = Path(__file__).parent / "data"
KINETO = DATA / "copy_side_stream.json.gz"


@pytest.mark.parametrize(
    ("name", "fmt"),
    [
        ("t.sqlite", "nsys-sqlite"),
        ("t.sqlite.gz", "nsys-sqlite"),
        ("t.nvtxt", "nvtxt"),
        ("t.json", "chrome"),
        ("t.json.gz", "chrome"),
        ("T.JSON.GZ", "chrome"),
        ("t.parquet", "parquet"),
    ],
)
def test_format_from_suffix(name: str, fmt: str) -> None:
    assert format_for_path(name).name == fmt


def test_unknown_suffix_names_the_choices() -> None:
    with pytest.raises(UsageError) as err:
        format_for_path("out.txt")
    assert str(err.value).startswith("out.txt: cannot tell the export format from the file name; use --to")
    assert ".sqlite (nsys-sqlite)" in str(err.value)


def test_explicit_format_wins_over_suffix_and_unknown_one_is_refused() -> None:
    assert get_exporter("chrome", "out.sqlite").name == "chrome"
    with pytest.raises(UsageError, match="unknown export format; choose one of nsys-sqlite, nvtxt, chrome, parquet"):
        get_exporter("perfetto", "out.json")


def test_registry_lists_the_four_formats() -> None:
    assert list(EXPORTERS) == ["nsys-sqlite", "nvtxt", "chrome", "parquet"]


def test_existing_output_needs_force_and_is_left_alone(tmp_path: Path) -> None:
    out = tmp_path / "t.json"
    out.write_text("keep me")
    timeline = load_trace(KINETO, cache=False)
    with pytest.raises(UsageError, match="already exists; pass --force to overwrite it"):
        export_timeline(timeline, out)
    assert out.read_text() == "keep me"
    export_timeline(timeline, out, force=True)
    assert out.read_bytes().startswith(b"{")


@pytest.mark.slow
def test_export_to_a_pipe_with_force_is_one_line_before_the_parse(tmp_path: Path) -> None:
    fifo = tmp_path / "p.json"
    os.mkfifo(fifo)
    proc = cli_main("export", str(KINETO), "-o", str(fifo), "--force")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [f"tracer: error: {fifo}: is not a regular file (a device, a pipe or a "
                                                "socket); give a file name"]
    assert stat.S_ISFIFO(fifo.lstat().st_mode)


@pytest.mark.slow
def test_export_to_standard_output_is_the_file_export(tmp_path: Path) -> None:
    # `-o -` wrote a file named "-"; now the export itself, for a pipe
    proc = run_cli("export", str(KINETO), "-o", "-", "--to", "chrome", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.startswith("wrote standard output (chrome): ") and list(tmp_path.iterdir()) == []
    piped = tmp_path / "piped.json"
    piped.write_text(proc.stdout)
    direct = tmp_path / "direct.json"
    assert cli_main("export", str(KINETO), "-o", str(direct)).returncode == 0
    from tracer.analysis.summary import summarize

    assert summarize(load_trace(piped, cache=False))["devices"] == \
        summarize(load_trace(direct, cache=False))["devices"]
    proc = cli_main("export", str(KINETO), "-o", "-", cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr == ("tracer: error: --to: -o - (standard output) has no suffix to "
                                                    "tell the format by: give --to\n")


def test_failed_export_leaves_nothing_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An exporter that fails half-way must leave neither the output nor its temporary file."""
    import tracer.exporters.chrome as chrome

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("disk full")

    monkeypatch.setattr(chrome, "build", broken)
    out = tmp_path / "t.json"
    with pytest.raises(RuntimeError, match="disk full"):
        export_timeline(load_trace(KINETO, cache=False), out)
    assert list(tmp_path.iterdir()) == []


def test_export_is_readable_by_others(tmp_path: Path) -> None:
    """Exports are for sharing: not the private mode of the temporary file they were written to."""
    old = os.umask(0o022)
    try:
        out = export_timeline(load_trace(KINETO, cache=False), tmp_path / "t.parquet").path
    finally:
        os.umask(old)
    assert stat.S_IMODE(out.stat().st_mode) == 0o644


@pytest.mark.slow
def test_cli_writes_each_format(tmp_path: Path) -> None:
    for name in ("t.sqlite", "t.nvtxt", "t.json.gz", "t.parquet"):
        proc = cli_main("export", str(KINETO), "-o", str(tmp_path / name))
        assert proc.returncode == 0, proc.stderr
        assert proc.stderr.startswith(f"wrote {tmp_path / name} (")
    with gzip.open(tmp_path / "t.json.gz") as f:
        assert f.read(1) == b"{"


def _gzip_header_name(path: Path) -> str:
    """The file name a gzip file's header holds (FNAME, RFC 1952), "" where it has none."""
    head = path.read_bytes()[:4096]
    assert head[:2] == b"\x1f\x8b"
    if not head[3] & 0x08:
        return ""
    return head[10 : head.index(b"\0", 10)].decode("latin-1")


def test_gzipped_exports_name_their_file_not_the_temporary_one(tmp_path: Path) -> None:
    timeline = load_trace(KINETO, cache=False)
    for name in ("t.json.gz", "t.sqlite.gz"):
        export_timeline(timeline, tmp_path / name)
        assert _gzip_header_name(tmp_path / name) == name.removesuffix(".gz")  # (gunzip -N restores it)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.json.gz", "t.sqlite.gz"]  # (no temporary left)


def test_an_nsys_sqlite_export_gzipped_reads_back_as_the_plain_one(tmp_path: Path) -> None:
    import pandas as pd

    timeline = load_trace(KINETO, cache=False)
    export_timeline(timeline, tmp_path / "t.sqlite")
    export_timeline(timeline, tmp_path / "t.sqlite.gz")
    with gzip.open(tmp_path / "t.sqlite.gz") as f:
        assert f.read(16) == b"SQLite format 3\x00"
    plain, zipped = load_trace(tmp_path / "t.sqlite", cache=False), load_trace(tmp_path / "t.sqlite.gz", cache=False)
    pd.testing.assert_frame_equal(zipped.events, plain.events, check_exact=True)


@pytest.mark.slow
def test_cli_refuses_to_overwrite_with_one_line_and_exit_2(tmp_path: Path) -> None:
    out = tmp_path / "t.sqlite"
    out.write_bytes(b"x")
    proc = cli_main("export", str(KINETO), "-o", str(out))
    assert proc.returncode == 2
    assert proc.stderr == f"tracer: error: {out}: already exists; pass --force to overwrite it\n"
    assert out.read_bytes() == b"x"
    proc = run_cli("export", str(KINETO), "-o", str(out), "--force", module=True)
    assert proc.returncode == 0, proc.stderr
    assert out.read_bytes()[:16] == b"SQLite format 3\x00"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-o", "{tmp}/t.txt"], "{tmp}/t.txt: cannot tell the export format from the file name; use --to"),
        (["-o", "{tmp}/t.json", "--to", "svg"], "svg: unknown export format; choose one of"),
        (["-o", "{tmp}"], "{tmp}: is a directory; give a file name for the export"),
    ],
)
def test_cli_bad_arguments_exit_2_before_parsing(tmp_path: Path, args: list[str], message: str) -> None:
    proc = cli_main("export", str(DATA / "no-such-trace.json"), *[a.format(tmp=tmp_path) for a in args])
    assert proc.returncode == 2
    assert proc.stderr.startswith("tracer: error: " + message.format(tmp=tmp_path))
    assert proc.stderr.count("\n") == 1


@pytest.mark.slow
def test_cli_output_under_a_file_is_one_line_before_parsing(tmp_path: Path) -> None:
    # `-o afile/t.sqlite` used to end in a FileExistsError traceback from mkdir, after the parse
    (tmp_path / "afile").write_text("")
    proc = cli_main("export", str(DATA / "no-such-trace.json"), "-o", str(tmp_path / "afile" / "sub" / "t.sqlite"))
    assert proc.returncode == 2
    assert proc.stderr == f"tracer: error: {tmp_path / 'afile'}: is a file, not a directory\n"


@pytest.mark.slow
def test_cli_missing_input_is_one_line(tmp_path: Path) -> None:
    proc = cli_main("export", str(tmp_path / "nope.json.gz"), "-o", str(tmp_path / "t.json"))
    assert proc.returncode == 2
    assert proc.stderr == f"tracer: error: {tmp_path / 'nope.json.gz'}: no such file or directory\n"
    assert not (tmp_path / "t.json").exists()


@pytest.mark.slow
def test_cli_exports_a_run_directory(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "trace.json.gz").write_bytes(KINETO.read_bytes())
    proc = cli_main("export", str(run), "-o", str(tmp_path / "t.parquet"))
    assert proc.returncode == 0, proc.stderr
    assert len(load_trace(tmp_path / "t.parquet").events) == len(load_trace(KINETO, cache=False).events)
