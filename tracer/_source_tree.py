"""``tracer.dashboard`` and ``tracer.scenarios`` when tracer runs from a checkout that was never installed.

The repository keeps ``dashboard/`` and ``scenarios/`` at its top (docs/design.md); a wheel installs them inside
the package as ``tracer.dashboard`` and ``tracer.scenarios`` (pyproject.toml's ``package-dir``), so nothing
generic lands at the top of site-packages. A checkout on PYTHONPATH (the GPU machine runs tracer that way) has
no such folders inside ``tracer/``: this finder gives the two names the same mapping there. An editable install
brings setuptools' own finder with the same mapping; this one asks first, so a checkout on PYTHONPATH gets its own
folders even where another checkout is installed editable.

Only the standard library is imported here: ``import tracer`` stays light.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType

#: Subpackage of tracer → the repository folder it is kept in (the same mapping as pyproject.toml's package-dir).
MAPPED = {"tracer.dashboard": "dashboard", "tracer.scenarios": "scenarios"}


class SourceTreeFinder:
    """A meta path finder for exactly the names in :data:`MAPPED`, in the checkout at ``root``."""

    def __init__(self, root: str) -> None:
        self.root = root

    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> ModuleSpec | None:
        folder = MAPPED.get(fullname)
        if folder is None:
            return None
        init = os.path.join(self.root, folder, "__init__.py")
        if not os.path.isfile(init):
            return None
        # Its submodules (tracer.dashboard.app, ...) are then found the ordinary way, through this __path__.
        return importlib.util.spec_from_file_location(fullname, init,
                                                      submodule_search_locations=[os.path.dirname(init)])


def install(package_dir: str) -> bool:
    """Add the finder when the tracer package at ``package_dir`` is a checkout's; True when it was added.

    Installed from a wheel, the mapped folders are inside the package and nothing is added; the finder is also
    added once only, however often this is called.
    """
    if any(os.path.isdir(os.path.join(package_dir, name.rpartition(".")[2])) for name in MAPPED):
        return False
    root = os.path.dirname(package_dir)
    if not any(os.path.isfile(os.path.join(root, folder, "__init__.py")) for folder in MAPPED.values()):
        return False
    if any(isinstance(finder, SourceTreeFinder) for finder in sys.meta_path):
        return False
    # First, so that the dashboard beside *this* tracer is the one imported: an editable install of another
    # checkout (its setuptools finder maps the same names to that checkout) must not answer for this one.
    sys.meta_path.insert(0, SourceTreeFinder(root))
    return True
