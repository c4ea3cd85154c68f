"""Every third-party module the installed package imports is declared in pyproject.toml.

The wheel smoke test (scripts/smoke_wheel.py) runs in a venv that borrows .venv's packages, so a dependency
missing from ``[project.dependencies]`` would not fail it; a clean venv to catch it costs minutes. This reads the
imports instead (the AST of every module under tracer/, the dashboard and scenarios through their links) and
maps each to the distribution that provides it in this environment:

- imported at module level: its distribution must be in ``dependencies``;
- imported inside a function or a ``try`` (used only on some path): in ``dependencies`` or an optional extra.

Prints one line per problem and exits 1; silent and 0 when all is declared.

    .venv/bin/python scripts/check_deps.py
"""

from __future__ import annotations

import ast
import re
import sys
from importlib.metadata import packages_distributions
from pathlib import Path
from typing import Any

import tomllib

ROOT = Path(__file__).resolve().parents[1]


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _dist_names(specs: list[str]) -> set[str]:
    return {_norm(re.split(r"[<>=!~\[; ]", s, maxsplit=1)[0]) for s in specs}


def imports(path: Path) -> list[tuple[str, bool, int]]:
    """(top-level module, imported at module level, line) for each absolute import in ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    out: list[tuple[str, bool, int]] = []

    def visit(node: ast.AST, top: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                out.extend((a.name.split(".")[0], top, child.lineno) for a in child.names)
            elif isinstance(child, ast.ImportFrom) and child.level == 0 and child.module:
                out.append((child.module.split(".")[0], top, child.lineno))
            nested = isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Try, ast.If))
            # (an `if TYPE_CHECKING:` block or a guarded import is not a hard module-level import either)
            visit(child, top and not nested)

    visit(tree, True)
    return out


def problems(files: list[Path], project: dict[str, Any]) -> list[str]:
    """One line per import in ``files`` that ``project`` (pyproject's ``[project]`` table) does not declare."""
    required = _dist_names(project["dependencies"])
    optional = set().union(*(_dist_names(v) for v in project.get("optional-dependencies", {}).values()))
    providers = packages_distributions()
    stdlib = set(sys.stdlib_module_names)
    out: list[str] = []
    for path in files:
        for module, top, line in imports(path):
            if module in stdlib or module == "tracer":
                continue
            dists = {_norm(d) for d in providers.get(module, [])}
            where = f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}:{line}"
            if not dists:
                out.append(f"{where}: imports {module}, which no installed distribution provides")
            elif top and not dists & required:
                out.append(f"{where}: imports {module} at module level; {'/'.join(sorted(dists))} is not in "
                           "[project.dependencies]")
            elif not dists & (required | optional):
                out.append(f"{where}: imports {module}; {'/'.join(sorted(dists))} is in no dependency list")
    return out


def main() -> int:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    # (rglob does not follow tracer/dashboard and tracer/scenarios, links to these folders)
    files = sorted(p for top in ("tracer", "dashboard", "scenarios") for p in (ROOT / top).rglob("*.py"))
    found = problems(files, project)
    for p in found:
        print(f"check_deps: {p}", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
