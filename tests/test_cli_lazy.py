"""The command modules are imported only when their command runs: `tracer --help` lists every command from
`tracer.cli.COMMANDS`, which must say what the modules themselves say."""

from __future__ import annotations

import importlib
import inspect
import subprocess
import sys

import pytest
import typer.main
from typer.core import TyperGroup
from typer.testing import CliRunner

import tracer.cli as cli


def _import_every_command_module() -> None:
    for command in cli.COMMANDS.values():
        importlib.import_module(f"tracer.cli.{command.module}")


def test_the_table_names_every_command_registered() -> None:
    _import_every_command_module()
    registered = {info.name or typer.main.get_command_name(info.callback.__name__)
                  for info in cli.app.registered_commands if info.callback is not None}
    assert registered == set(cli.COMMANDS)


@pytest.mark.parametrize("name", list(cli.COMMANDS))
def test_the_tables_short_help_is_the_commands_own(name: str) -> None:
    command = cli.load_command(name)
    assert command.name == name
    # (what Typer lists of a command: the first paragraph of its help, its line breaks made spaces)
    first = inspect.cleandoc(command.short_help or command.help or "").split("\n\n")[0].replace("\n", " ").strip()
    assert cli.COMMANDS[name].short_help == first


@pytest.mark.parametrize("width", ["200", "80", "50"])
def test_the_listing_is_the_one_the_commands_themselves_give(width: str, monkeypatch: pytest.MonkeyPatch) -> None:
    def help_text() -> str:
        result = CliRunner().invoke(cli.app, ["--help"], prog_name="tracer", env={"COLUMNS": width, "TERM": "dumb"})
        assert result.exit_code == 0, result.output
        return result.output

    lazy = help_text()
    _import_every_command_module()
    monkeypatch.setattr(cli.TracerGroup, "format_help", TyperGroup.format_help)  # (each command built and asked)
    assert help_text() == lazy
    where = [lazy.index(f"│ {name} ") for name in cli.COMMANDS]  # (listed in the table's order)
    assert where == sorted(where)


def test_help_version_and_a_usage_error_import_no_command_module() -> None:
    code = ("import sys; from tracer.cli import main\n"
            "for args in (['--help'], ['--version'], ['nope'], ['sumary'], []): main(args)\n"
            "print([m for m in sys.modules if m.startswith('tracer.cli.') or m.split('.')[0] in "
            "('pandas', 'dash', 'duckdb', 'torch', 'rich.table')], file=sys.stderr)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "Did you mean 'summary'?" in proc.stderr  # (the names alone give Typer's suggestion)
    assert proc.stderr.splitlines()[-1] == "[]"


@pytest.mark.slow
def test_a_commands_help_imports_its_module_only_and_record_no_torch() -> None:
    code = ("import sys; from tracer.cli import main\n"
            "main(['record', '--help']); main(['scenarios', '--help']); main(['diff', '--help'])\n"
            "print(sorted(m for m in sys.modules if m.startswith('tracer.cli.') and not m.startswith('tracer.cli._')),"
            " 'torch' in sys.modules, file=sys.stderr)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    # (record prints a run's findings as explain does: it imports tracer.cli.explain)
    assert proc.stderr.splitlines()[-1] == "['tracer.cli.diff', 'tracer.cli.explain', 'tracer.cli.record'] False"
