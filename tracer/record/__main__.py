"""``python -m tracer.record SCENARIO ...``: ``tracer record`` without the CLI's dependencies
(:mod:`tracer.record.main`)."""

import sys

from tracer.record.main import main

sys.exit(main())
