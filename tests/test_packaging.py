"""The installed layout (issue 18): one version source, tracer.dashboard / tracer.scenarios from the repository's
top-level folders in a wheel, an editable install and a bare checkout on PYTHONPATH alike.

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
from tracer import _source_tree
from tracer.cli import main
from tracer.exporters import tracer_version

tomllib = pytest.importorskip("tomllib")  # Python 3.11+; the checks are the same on every version

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
SETUPTOOLS = PYPROJECT["tool"]["setuptools"]


def _packages_on_disk() -> set[str]:
    """Every folder with an __init__.py, by the name a wheel installs it under."""
    found: set[str] = set()
    for folder, name in (("tracer", "tracer"), ("dashboard", "tracer.dashboard"), ("scenarios", "tracer.scenarios")):
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder).parts
            if "__pycache__" not in rel:
                found.add(".".join((name, *rel)))
    return found


def test_the_package_list_names_every_package_folder() -> None:
    # packages.find cannot follow package-dir, so the list is by hand: a new subpackage left off it would be
    # missing from the wheel (and only the wheel smoke would notice)
    assert set(SETUPTOOLS["packages"]) == _packages_on_disk()


def test_the_mapping_is_the_same_in_pyproject_and_in_the_source_tree_finder() -> None:
    assert SETUPTOOLS["package-dir"] == _source_tree.MAPPED
    assert all(not name.startswith(("dashboard", "scenarios")) for name in SETUPTOOLS["packages"])
    assert set(SETUPTOOLS["package-data"]) <= set(SETUPTOOLS["packages"])


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
    assert PYPROJECT["project"]["scripts"] == {"tracer": "tracer.cli:main"}


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


def _checkout(tmp: Path, *, installed: bool) -> Path:
    """A tracer package folder: beside dashboard/ and scenarios/ (a checkout) or holding them (an install)."""
    pkg = tmp / "tracer"
    home = pkg if installed else tmp
    for folder in ("dashboard", "scenarios"):
        (home / folder).mkdir(parents=True)
        (home / folder / "__init__.py").write_text("")
    pkg.mkdir(exist_ok=True)
    return pkg


def test_the_finder_maps_exactly_the_two_names(tmp_path: Path) -> None:
    finder = _source_tree.SourceTreeFinder(str(_checkout(tmp_path, installed=False).parent))
    spec = finder.find_spec("tracer.dashboard")
    assert spec is not None and spec.origin == str(tmp_path / "dashboard" / "__init__.py")
    assert spec.submodule_search_locations == [str(tmp_path / "dashboard")]
    assert finder.find_spec("tracer.analysis") is None and finder.find_spec("dashboard") is None
    assert finder.find_spec("tracer.dashboard.app") is None  # found through tracer.dashboard's __path__


def test_the_finder_is_not_installed_over_an_installed_layout(tmp_path: Path) -> None:
    before = list(sys.meta_path)
    assert _source_tree.install(str(_checkout(tmp_path / "wheel", installed=True))) is False
    assert _source_tree.install(str(tmp_path / "bare" / "tracer")) is False  # no dashboard/ anywhere near
    # already there: this very test session imported tracer from the checkout
    assert _source_tree.install(str(_checkout(tmp_path / "src", installed=False))) is False
    assert sys.meta_path == before


def test_a_bare_checkout_on_pythonpath_runs_the_mapped_packages(tmp_path: Path) -> None:
    # what the GPU machine does: no install at all, only PYTHONPATH=<repository root>; cwd elsewhere
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    code = ("import tracer.dashboard.ids, tracer.scenarios.registry as r, sys; "
            "print(tracer.dashboard.ids.__file__); print(r.__file__); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('dashboard', 'scenarios')))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [str(ROOT / "dashboard" / "ids.py"), str(ROOT / "scenarios" / "registry.py"),
                                        "[]"]
    listed = subprocess.run([sys.executable, "-m", "tracer.scenarios", "list"], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0, listed.stderr
    assert "compute-copy" in listed.stdout
