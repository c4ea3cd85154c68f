"""The installed layout (issue 18): one version source; tracer.dashboard / tracer.scenarios from the repository's
top-level folders (through the links tracer/dashboard and tracer/scenarios) in a wheel, an editable install and a
bare checkout on PYTHONPATH alike.

The wheel itself is built, checked and smoke-run by scripts/check_wheel.sh (scripts/check.sh); these are the
fast checks that need no build."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import tracer
from tracer.cli import main
from tracer.exporters import tracer_version

tomllib = pytest.importorskip("tomllib")  # Python 3.11+; the checks are the same on every version

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
SETUPTOOLS = PYPROJECT["tool"]["setuptools"]


#: The repository's top-level folders and the name each has inside tracer.
MAPPED = {"dashboard": "tracer.dashboard", "scenarios": "tracer.scenarios"}


def test_the_top_level_folders_are_linked_into_the_package() -> None:
    for folder, name in MAPPED.items():
        link = ROOT / "tracer" / name.rpartition(".")[2]
        # relative, so that it holds in every checkout and copy of the tree
        assert link.is_symlink() and os.readlink(link) == f"../{folder}", link
        assert link.resolve() == (ROOT / folder).resolve()


def test_setuptools_finds_every_package_under_tracer_and_nothing_else() -> None:
    from setuptools import find_packages  # type: ignore[import-untyped]  # (no stubs)

    found = set(find_packages(str(ROOT), include=SETUPTOOLS["packages"]["find"]["include"]))
    on_disk = {".".join(Path(folder).relative_to(ROOT).parts)
               for folder, _, files in os.walk(ROOT / "tracer", followlinks=True) if "__init__.py" in files}
    assert found == on_disk
    assert {"tracer.dashboard", "tracer.dashboard.pages", "tracer.scenarios"} <= found
    assert all(name == "tracer" or name.startswith("tracer.") for name in found)
    assert set(SETUPTOOLS["package-data"]) <= found


def test_one_version_source() -> None:
    assert PYPROJECT["project"]["dynamic"] == ["version"] and "version" not in PYPROJECT["project"]
    assert SETUPTOOLS["dynamic"]["version"] == {"attr": "tracer.__version__"}
    assert re.fullmatch(r"\d+\.\d+\.\d+", tracer.__version__)
    assert tracer_version() == tracer.__version__
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert f"## [{tracer.__version__}]" in changelog


def test_version_option_prints_the_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"tracer {tracer.__version__}\n"


def test_the_distribution_is_not_named_tracer() -> None:
    # `tracer` on PyPI is an unrelated project (sys.settrace management): pip install tracer would give a user that
    assert PYPROJECT["project"]["name"] == "torch-overlap-tracer"
    assert PYPROJECT["project"]["scripts"] == {"tracer": "tracer.cli:run"}


#: An import of the top-level names the repository's folders had before issue 18, in code or in a docs example.
OLD_IMPORT = re.compile(r"^\s*(?:from|import) (?:dashboard|scenarios)\b|-m[\"', ]+scenarios\b", re.M)


def test_nothing_imports_the_old_top_level_names() -> None:
    # Importing `scenarios` beside `tracer.scenarios` (from the repository root both resolve) would load the
    # registry twice, as two different modules
    tracked = subprocess.run(["git", "ls-files", "*.py", "*.md", "*.sh"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.split()
    assert tracked
    here = Path(__file__).relative_to(ROOT).as_posix()  # its examples below are old imports on purpose
    offenders = [f for f in tracked if f != here and OLD_IMPORT.search((ROOT / f).read_text(encoding="utf-8"))]
    assert offenders == []


def test_the_old_import_pattern_catches_what_it_should() -> None:
    for line in ("from scenarios import get", "    import dashboard.data as data", "import scenarios",
                 '[sys.executable, "-m", "scenarios", "run"]', "python -m scenarios list"):
        assert OLD_IMPORT.search(line), line
    for line in ("from tracer.scenarios import get", "python -m tracer.scenarios list", "# the dashboard imports"):
        assert not OLD_IMPORT.search(line), line


@pytest.mark.slow
def test_a_bare_checkout_on_pythonpath_runs_the_mapped_packages(tmp_path: Path) -> None:
    # what the GPU machine does: no install at all, only PYTHONPATH=<repository root>; cwd elsewhere
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    code = ("import tracer.dashboard.ids, tracer.scenarios.registry as r, sys; "
            "print(tracer.dashboard.ids.__file__); print(r.__file__); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('dashboard', 'scenarios')))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [str(ROOT / "tracer" / "dashboard" / "ids.py"),
                                        str(ROOT / "tracer" / "scenarios" / "registry.py"), "[]"]
    listed = subprocess.run([sys.executable, "-m", "tracer.scenarios", "list"], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0, listed.stderr
    assert "compute-copy" in listed.stdout
