"""Who may open the dashboard: off loopback, only a browser that shows the token printed at start (as Jupyter does).

A dashboard serves every run it lists and every trace uploaded to it. On 127.0.0.1 only this machine's users reach
it; on 0.0.0.0 (or any other address) every machine that can reach the port would. There, ``tracer dashboard``
makes a random token and prints the address with it (``http://host:8050/?token=...``); the first request that
carries it gets a cookie, so the pages' own requests need no token in their address, and any request without
either is refused (403) in one line.
"""

from __future__ import annotations

import hmac
import ipaddress
import secrets
import socket

from flask import Flask, Response, request

#: the query parameter and the cookie that carry the token
TOKEN_PARAM = "token"
COOKIE = "tracer_token"


def new_token() -> str:
    """A random token: 32 URL-safe characters (192 bits)."""
    return secrets.token_urlsafe(24)


def is_loopback(host: str) -> bool:
    """Whether every address ``host`` names is this machine's loopback (127.0.0.0/8, ::1): no other machine can
    connect there. A name that does not resolve is not loopback (the server refuses it anyway)."""
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except OSError:
        return False
    addresses = {str(info[4][0]) for info in infos}
    try:
        return bool(addresses) and all(ipaddress.ip_address(a.split("%")[0]).is_loopback for a in addresses)
    except ValueError:
        return False


def require_token(server: Flask, token: str) -> None:
    """Refuse every request to ``server`` that carries neither ``token`` (``?token=``) nor its cookie."""

    def carried() -> bool:
        given = request.args.get(TOKEN_PARAM) or request.cookies.get(COOKIE) or ""
        return hmac.compare_digest(given.encode(), token.encode())

    @server.before_request
    def _check() -> Response | None:
        if carried():
            return None
        return Response("This dashboard needs its token: open the address `tracer dashboard` printed "
                        "(…/?token=…).\n", status=403, mimetype="text/plain")

    @server.after_request
    def _remember(response: Response) -> Response:
        # (the page's own requests, its callbacks and assets, then carry the cookie, not the token)
        if request.args.get(TOKEN_PARAM) and carried():
            response.set_cookie(COOKIE, token, httponly=True, samesite="Strict")
        return response
