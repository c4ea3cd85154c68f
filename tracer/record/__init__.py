"""Recording: a scenario (:mod:`~tracer.record.scenario`, the front door imported without torch, and
:mod:`~tracer.record.scenario_run`, which runs the scenarios), a user's command (:mod:`~tracer.record.command`, with
the start-up hook :mod:`~tracer.record.capture` and ``_bootstrap/``), a job of several ranks
(:mod:`~tracer.record.ranks`: the ranks' and the launcher's processes; :mod:`~tracer.record.gather`), or a block
of a user's program (the API, :mod:`~tracer.record.api`), each into one run directory whose timeline and summary
:mod:`~tracer.record.derive` makes. ``python -m tracer.record`` is ``tracer record`` without the CLI's
dependencies (:mod:`~tracer.record.main`).

May import: :mod:`tracer.scenarios`, :mod:`tracer.job`, :mod:`tracer.analysis`, :mod:`tracer.parsers`,
:mod:`tracer.files`, :mod:`tracer.timeline` and the root's helpers; never the CLI or the dashboard. Importing
this package imports nothing (``python -m tracer.record.ranks`` starts every rank through it).
"""
