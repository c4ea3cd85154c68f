"""Off loopback the dashboard asks for the token it printed at start (issue 38); on loopback it asks for none."""

from __future__ import annotations

import re
import sys
import urllib.error
import urllib.request

import pytest

from tests.conftest import start_dashboard
from tracer.dashboard.access import COOKIE, is_loopback, new_token, require_token
from tracer.dashboard.app import create_app


def test_loopback_is_told_from_other_addresses() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("localhost") and is_loopback("::1")
    assert not is_loopback("0.0.0.0") and not is_loopback("::") and not is_loopback("no-such-host.invalid")


def test_every_request_needs_the_token_or_its_cookie() -> None:
    app = create_app(examples=False, runs_dir=None)
    token = new_token()
    require_token(app.server, token)
    client = app.server.test_client()
    for path in ("/", "/runs", "/_dash-layout", "/assets/style.css", f"/?token={token[:-1]}"):
        answer = client.get(path)
        assert answer.status_code == 403 and b"needs its token" in answer.data, path
    first = client.get(f"/?token={token}")
    assert first.status_code == 200
    assert f"{COOKIE}={token}" in first.headers["Set-Cookie"] and "HttpOnly" in first.headers["Set-Cookie"]
    assert client.get("/_dash-layout").status_code == 200  # the cookie, not the token, from then on


@pytest.mark.slow
def test_served_on_all_interfaces_it_prints_a_token_and_refuses_without_it() -> None:
    proc, lines = start_dashboard([sys.executable, "-m", "tracer", "dashboard", "--no-examples", "--host", "0.0.0.0"])
    try:
        url = re.search(r"(http://\S+)", lines[-1])
        assert url is not None and "?token=" in url.group(1), lines
        port = re.search(r":(\d+)/", url.group(1))
        assert port is not None
        base = f"http://127.0.0.1:{port.group(1)}/"
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(base, timeout=30)
        assert refused.value.code == 403
        token = url.group(1).split("?token=")[1]
        with urllib.request.urlopen(f"{base}?token={token}", timeout=30) as answer:
            assert answer.status == 200
    finally:
        proc.terminate()
        proc.communicate(timeout=60)
