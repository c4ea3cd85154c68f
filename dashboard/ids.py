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
#: store: {"run": key, "window": [lo, hi], "highlight": src | None, "path": bool, "line": i | None, "drawn": {...}}
#: (what the chart shows; "drawn": the rest of what it was drawn from, and its bar counts)
TL_STATE = "timeline-state"
#: store: the window asked for: {"relayout": {...}} | {"range_ms": [a, b]} | {"whole": n_clicks}; or
#: {"path": bool}: the critical path overlay on or off, the window as it is
TL_WANT = "timeline-want"
TL_CARDS = "timeline-cards"
TL_RANKS = "timeline-ranks"  # checklist: the ranks shown (a job's timeline)
TL_FOLD = "timeline-fold"  # checklist: the ranks folded into one lane each
TL_RANK_CONTROLS = "timeline-rank-controls"
TL_COLLECTIVES = "timeline-collectives"  # the collectives section (a job with communication)
TL_COLL_TABLE = "timeline-collectives-table"  # AG Grid: one row per collective instance; a click zooms
TL_RANK_SKEW = "timeline-rank-skew"  # table: per rank, skew and clock bounds
TL_PATH = "timeline-path"  # checklist: ["on"] draws the critical path over the lanes
TL_PATH_NOTE = "timeline-path-note"  # why the critical path starts off (a busy run: its line would hide the bars)
TL_FIND_SECTION = "timeline-findings-section"  # the findings section (dashboard/explain_view.py)
TL_FINDINGS = "timeline-findings"  # the panel: the reason explain cannot run, or the groups and the table
TL_FIND_RUN = "timeline-findings-run"  # button: explain a big trace (not explained when the page opens)
TL_FIND_GROUPS = "timeline-findings-groups"  # table: one row per kind of finding
TL_FIND_TABLE = "timeline-findings-table"  # AG Grid: one row per finding; a click zooms to its intervals
TL_FIND_REASON = "timeline-findings-reason"  # the one line saying why explain cannot run on this trace
TL_FIND_NONE = "timeline-findings-none"  # the line saying what an empty findings table means for the run
TL_LINES = "timeline-lines"  # the "by source line" part under the findings (dashboard/lines_view.py)
TL_LINES_TABLE = "timeline-lines-table"  # AG Grid: one row per line of the user's code; a click outlines its intervals
TL_LINES_NOTE = "timeline-lines-note"  # the one line saying why there are no source lines (no Python stacks ...)
TL_LINE_CLEAR = "timeline-line-clear"  # button: no line outlined
#: store: the line outlined on the timeline, {"run": key, "row": i} (a row of the lines table), or None
TL_LINE = "timeline-line"
TL_FRAME = "timeline-frame"  # the clicked interval's user frame and the chain above it (under the chart)

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
