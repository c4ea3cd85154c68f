"""Real-browser fixtures: the dashboard served from a thread, driven by Debian's Chromium via Playwright.

Chromium is found at /usr/bin/chromium (``apt-get install chromium``) or $TRACER_CHROMIUM. Without it the
browser tests skip locally and *fail* under CI (CI=true), so a CI machine without a browser cannot pass
them silently.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tracer.dashboard.headless import CHROMIUM, CHROMIUM_ARGS

if TYPE_CHECKING:  # (playwright is imported where a browser starts)
    from playwright.sync_api import Browser, Page

DATA = Path(__file__).resolve().parents[1] / "data"


def _need_chromium() -> None:
    problem = None
    if not CHROMIUM.exists():
        problem = f"{CHROMIUM} not found: install Debian's chromium (apt-get install -y chromium)"
    else:
        try:
            import playwright.sync_api  # noqa: F401
        except ImportError:
            problem = "the playwright Python package is missing (pip install -e '.[test]')"
    if problem:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"browser tests cannot run under CI: {problem}", pytrace=False)
        pytest.skip(problem)


@pytest.fixture(scope="session")
def browser() -> Iterator[object]:
    _need_chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1500, "height": 950})
    pg = context.new_page()
    pg.set_default_timeout(30_000)
    errors: list[str] = []
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    pg.js_errors = errors  # type: ignore[attr-defined]  # (our own attribute: the tests read the page's JS errors)
    yield pg
    context.close()


class Served:
    def __init__(self, app) -> None:
        from werkzeug.serving import make_server

        self.app = app
        self.store = app.tracer_store
        self._server = make_server("127.0.0.1", 0, app.server, threaded=True)
        self.url = f"http://127.0.0.1:{self._server.server_port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._thread.join(5)


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Iterator[Served]:
    """The app over the bundled examples and tests/data (runs_dir off: the tests must not see ./runs)."""
    _need_chromium()
    from tracer.dashboard.app import create_app
    from tracer.dashboard.data import RunStore

    store = RunStore([DATA], examples=True, runs_dir=None, upload_dir=tmp_path_factory.mktemp("uploads"))
    server = Served(create_app(store=store))
    yield server
    server.close()
