"""tracer's dashboard: a Plotly Dash app over runs and traces (``tracer dashboard``).

``create_app`` builds the app; :mod:`tracer.dashboard.figures` builds the same figures for a notebook. Imported
only by ``tracer dashboard`` and the tests: nothing in ``tracer`` imports this package.
"""

from __future__ import annotations

__all__ = ["create_app"]


def create_app(*args, **kwargs):
    from tracer.dashboard.app import create_app as _create_app  # (Dash: not for a notebook's figures or the data layer)

    return _create_app(*args, **kwargs)


create_app.__doc__ = "Build the Dash app; see :func:`tracer.dashboard.app.create_app`."
