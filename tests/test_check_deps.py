"""scripts/check_deps.py: a third-party import the project does not declare is named; a declared one, a
stdlib one and one guarded inside a function (declared only as an extra) pass."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("check_deps", ROOT / "scripts" / "check_deps.py")
assert _spec and _spec.loader
check_deps = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check_deps)

PROJECT = {"dependencies": ["numpy>=1.26", "pandas"], "optional-dependencies": {"cluster": ["distributed"]}}


@pytest.mark.slow
def test_an_undeclared_module_level_import_is_named(tmp_path: Path) -> None:
    f = tmp_path / "m.py"
    f.write_text("import json\nimport numpy as np\nfrom pandas import DataFrame\nimport yaml\n")
    (line,) = check_deps.problems([f], PROJECT)
    assert line.endswith("m.py:4: imports yaml at module level; pyyaml is not in [project.dependencies]")


@pytest.mark.slow
def test_an_extra_is_enough_for_a_guarded_import_but_not_for_a_module_level_one(tmp_path: Path) -> None:
    f = tmp_path / "m.py"
    f.write_text("def f():\n    import distributed\n\ntry:\n    import distributed\nexcept ImportError:\n    pass\n")
    assert check_deps.problems([f], PROJECT) == []
    f.write_text("import distributed\n")
    assert "not in [project.dependencies]" in check_deps.problems([f], PROJECT)[0]


@pytest.mark.slow
def test_the_project_declares_every_import() -> None:
    assert check_deps.main() == 0
