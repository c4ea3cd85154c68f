"""Traps a newcomer fell into at the command line (issue 36): each is one clear line now, or a note."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest

from tracer.cli import main

DATA = Path(__file__).parent / "data"


def test_an_export_into_a_missing_folder_is_refused_unless_asked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "no" / "such" / "x.json"
    assert main(["export", str(DATA / "two_streams.json.gz"), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err == f"tracer: error: {tmp_path / 'no'}: does not exist: create it, or pass --parents to create the " \
                  "output's folders\n"
    assert not (tmp_path / "no").exists()
    assert main(["export", str(DATA / "two_streams.json.gz"), "-o", str(out), "--parents"]) == 0
    assert out.is_file()


def test_a_scenario_parameter_without_p_is_told_how(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["record", "compute-copy", "variant=side-stream"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "a scenario's parameters go after -p: -p variant=side-stream" in err


def test_sql_with_no_query_and_nothing_on_standard_input_says_so(monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    assert main(["sql", str(DATA / "two_streams.json.gz")]) == 2
    assert "no query: give one after the TARGET, or pipe statements" in capsys.readouterr().err
    monkeypatch.setattr(sys, "stdin", io.StringIO("SELECT count(*) AS n FROM kernels;\n"))
    assert main(["sql", str(DATA / "two_streams.json.gz"), "--format", "csv"]) == 0
    assert capsys.readouterr().out.split() == ["n", "100"]


def test_summary_job_of_one_rank_says_it_read_one(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["summary", "--job", "--json", str(DATA / "two_streams.json.gz")]) == 0
    assert "tracer: note: --job read one rank (1 trace): this is that rank's summary" in capsys.readouterr().err
