"""Every component id of the app, in one place (pages and tests import them from here)."""

# app shell
URL = "url"
PAGE = "page"
VIEWPORT = "viewport"
UPLOAD = "upload"
UPLOAD_STATUS = "upload-status"

# runs page
RUNS_FILTER = "runs-filter"
RUNS_TABLE = "runs-table"
RUNS_SORT = "runs-sort"  # store: {"col": ..., "desc": bool}
RUNS_SORT_BUTTON = "runs-sort-button"  # pattern-matching type: {"type": RUNS_SORT_BUTTON, "col": ...}
RUNS_PICK = "runs-pick"  # pattern-matching type: {"type": RUNS_PICK, "run": key}
RUNS_PICKED = "runs-picked"  # store: [key, ...]
RUNS_COMPARE = "runs-compare"
RUNS_COUNT = "runs-count"

# timeline page
TL_GRAPH = "timeline-graph"
TL_MINIMAP = "timeline-minimap"
TL_LANES = "timeline-lanes"
TL_RESET = "timeline-reset"
TL_STATUS = "timeline-status"
TL_LAUNCH = "timeline-launch"
TL_STATE = "timeline-state"  # store: {"run": key, "window": [lo, hi], "highlight": src | None} (drawn)
#: store: the window asked for: {"relayout": {...}} | {"range_ms": [a, b]} | {"whole": n_clicks}
TL_WANT = "timeline-want"
TL_CARDS = "timeline-cards"
TL_RANKS = "timeline-ranks"  # checklist: the ranks shown (a job's timeline)
TL_FOLD = "timeline-fold"  # checklist: the ranks folded into one lane each
TL_RANK_CONTROLS = "timeline-rank-controls"
TL_COLLECTIVES = "timeline-collectives"  # the collectives section (a job with communication)
TL_COLL_TABLE = "timeline-collectives-table"  # DataTable: one row per collective instance; a click zooms
TL_RANK_SKEW = "timeline-rank-skew"  # table: per rank, skew and clock bounds

# compare page
CMP_GRAPH = "compare-graph"
#: store: {"runs": [a, b], "window": [lo, hi], "highlight": [kind, name] | None}
CMP_STATE = "compare-state"
CMP_STATUS = "compare-status"
CMP_RESET = "compare-reset"
CMP_CLEAR = "compare-clear"  # button: no highlighted diff item
CMP_ROWS = "compare-diff-rows"  # store: [[kind, name], ...], the diff table's rows in order
# the diff under the timelines (dashboard/diff_view.py)
DIFF_SECTION = "compare-diff"
DIFF_TABLE = "compare-diff-table"
DIFF_CHART = "compare-diff-chart"
DIFF_ROW = "diff-row"  # pattern-matching type: {"type": DIFF_ROW, "index": i}, a row of the table
