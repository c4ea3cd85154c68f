"""The docs site's griffe extension (scripts/griffe_tracer.py): ``#:`` comments and Sphinx roles as mkdocstrings
gets them. The site build itself is scripts/check.sh's (``mkdocs build --strict``)."""

from __future__ import annotations

import importlib.util
import textwrap
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

griffe = pytest.importorskip("griffe")

ROOT = Path(__file__).resolve().parents[1]


def _extension_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("griffe_tracer", ROOT / "scripts" / "griffe_tracer.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _load(tmp_path: Path, files: dict[str, str]) -> Any:  # a griffe.Module (griffe is imported at run time)
    for name, text in files.items():
        path = tmp_path / "pkg" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    extensions = griffe.load_extensions(_extension_module().TracerDocstrings())
    return griffe.load("pkg", search_paths=[tmp_path], extensions=extensions)


def test_comment_above_an_attribute_becomes_its_docstring(tmp_path: Path) -> None:
    pkg = _load(tmp_path, {"__init__.py": '''
        from dataclasses import dataclass

        #: Column name -> dtype.
        #: The order here is the order of the columns.
        COLUMNS = {"start_ns": "int64"}

        # a plain comment is not documentation
        PLAIN = 1

        @dataclass
        class Meta:
            """What a trace says about itself."""

            #: GPU index -> device name
            gpu_names: dict = None
            source: str = ""  # a trailing comment is not documentation either
            clock: str = ""
            """A docstring of its own wins."""
        '''})
    assert pkg["COLUMNS"].docstring.value == "Column name -> dtype.\nThe order here is the order of the columns."
    assert pkg["PLAIN"].docstring is None
    assert pkg["Meta.gpu_names"].docstring.value == "GPU index -> device name"
    assert pkg["Meta.source"].docstring is None
    assert pkg["Meta.clock"].docstring.value == "A docstring of its own wins."


def test_roles_become_optional_cross_references_resolved_in_scope(tmp_path: Path) -> None:
    pkg = _load(tmp_path, {
        "__init__.py": "",
        "timeline.py": '''
            class Timeline:
                """A parsed trace."""
            ''',
        "parsers.py": '''
            """Open a trace as a :class:`~pkg.timeline.Timeline` (:class:`Timeline` for short); see :func:`derive`,
            :mod:`pkg.timeline` and :meth:`Reader.read`."""

            from pkg.timeline import Timeline


            def derive():
                """Uses :func:`the reader <Reader.read>` and :data:`UNKNOWN`."""


            class Reader:
                def read(self):
                    """Calls :meth:`close` and :func:`derive`."""
            ''',
    })
    doc = pkg["parsers"].docstring.value
    ref = '<autoref identifier="{}" optional><code>{}</code></autoref>'
    assert ref.format("pkg.timeline.Timeline", "Timeline") in doc  # "~": the last part shown
    assert doc.count(ref.format("pkg.timeline.Timeline", "Timeline")) == 2  # the import resolved to its home
    assert ref.format("pkg.parsers.derive", "derive") in doc
    assert ref.format("pkg.timeline", "pkg.timeline") in doc
    assert ref.format("pkg.parsers.Reader.read", "Reader.read") in doc
    assert ":class:" not in doc and ":func:" not in doc
    inner = pkg["parsers.derive"].docstring.value
    assert ref.format("pkg.parsers.Reader.read", "the reader") in inner
    assert ref.format("UNKNOWN", "UNKNOWN") in inner  # not found anywhere: left as written, shown as code
    method = pkg["parsers.Reader.read"].docstring.value
    assert ref.format("pkg.parsers.Reader.close", "close") not in method  # no such member: not invented
    assert ref.format("close", "close") in method
    assert ref.format("pkg.parsers.derive", "derive") in method  # a method's scope reaches its module
