"""A griffe extension for the docs site (mkdocs.yml loads it): tracer's docstrings as mkdocstrings should read them.

tracer's code documents itself the Sphinx way, which griffe does not read by default:

- ``#:`` comments above a module attribute or a dataclass field are its documentation; griffe only reads a
  string literal placed *after* the assignment, so without this those fields render bare.
- ``:class:`~tracer.timeline.Timeline```, ``:func:`derive``` ... roles name other objects; Markdown shows them as
  literal text. They become autorefs cross-references, resolved in the object's scope the way Python would (a
  bare ``derive`` in tracer.record.derive is tracer.record.derive.derive). They are *optional* references: a link
  where the target has an API page, plain code where it does not (a private helper), so a role never fails the build.

Nothing here changes the code's docstrings; it changes what griffe hands to mkdocstrings.
"""

from __future__ import annotations

import html
import re
from typing import Any

import griffe

# :role:`target`, :role:`~a.b.target` (show only the last part) and :role:`text <target>` (show text).
_ROLE = re.compile(r":(?:py:)?(?:class|func|data|mod|attr|meth|exc|obj|const):`(?P<body>[^`]+)`")
_TITLED = re.compile(r"^(?P<text>.+?)\s*<(?P<target>[^<>]+)>$")
_LOGGER = griffe.logger


def _resolve(obj: griffe.Object, target: str) -> str:
    """The full path of ``target`` as seen from ``obj``: dotted names that start at a package are kept, a bare
    or relative name is looked up in ``obj``'s scope (its members, then its parents', imports included)."""
    first, _, rest = target.partition(".")
    scope: griffe.Object = obj if obj.is_class or obj.is_module else (obj.parent or obj)
    try:
        head = scope.resolve(first)
    except griffe.NameResolutionError:
        return target  # a full path (tracer.timeline.Timeline) or a name griffe does not know: as written
    return f"{head}.{rest}" if rest else head


def _crossref(obj: griffe.Object, match: re.Match[str]) -> str:
    body = match["body"].strip()
    titled = _TITLED.match(body)
    if titled:
        text, target = titled["text"], titled["target"]
    else:
        target = body.lstrip("~")
        text = target.rsplit(".", 1)[-1] if body.startswith("~") else target
    target = target.rstrip("()")
    identifier = _resolve(obj, target)
    return f'<autoref identifier="{html.escape(identifier)}" optional><code>{html.escape(text)}</code></autoref>'


def _comment_doc(attr: griffe.Attribute) -> str | None:
    """The ``#:`` comment block right above ``attr``'s first line, without the markers; None if there is none."""
    module = attr.module
    lineno = attr.lineno
    if lineno is None or not module.filepath:
        return None
    lines = module.lines
    found: list[str] = []
    i = lineno - 2  # 0-based index of the line above the assignment
    while i >= 0:
        stripped = lines[i].strip()
        if not stripped.startswith("#:"):
            break
        found.append(stripped[2:].strip())
        i -= 1
    return "\n".join(reversed(found)) if found else None


class TracerDocstrings(griffe.Extension):
    """Reads ``#:`` attribute comments and turns Sphinx roles into cross-references, once a package is loaded."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        self._walk(pkg, seen=set())

    def _walk(self, obj: griffe.Object, seen: set[str]) -> None:
        if obj.path in seen:
            return
        seen.add(obj.path)
        if obj.is_attribute and obj.docstring is None:
            text = _comment_doc(obj)  # type: ignore[arg-type]
            if text:
                obj.docstring = griffe.Docstring(text, lineno=obj.lineno, parent=obj)
        if obj.docstring is not None and ":" in obj.docstring.value:
            obj.docstring.value = _ROLE.sub(lambda m: _crossref(obj, m), obj.docstring.value)
        for member in obj.members.values():
            if not member.is_alias:
                self._walk(member, seen)  # type: ignore[arg-type]
