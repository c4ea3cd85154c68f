"""`tracer scenarios`: labelled columns, the details rendered (not their markup)."""

from __future__ import annotations

import pytest

from tracer.cli import main


def test_listing_labels_its_default_columns(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["scenarios"]) == 0
    out = capsys.readouterr().out
    assert "CPU default" in out and "GPU default" in out and "meaning" in out


def test_details_are_rendered_not_shown_as_markup(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["scenarios", "compute-copy"]) == 0
    out = capsys.readouterr().out
    assert "side-stream" in out and "non_blocking=True" in out
    assert "``" not in out  # reST code spans
    assert "*run+copy*" not in out  # emphasis markers
