"""The lesson player: one self-contained HTML file that steps through a computed trace in the browser.

Every round of the trace is embedded once as JSON and drawn by the page's own script (rows, ✓/✗
marks, struck-through rejections, corrections and bonus tokens, p-vs-q bars, the acceptance test of
each drafted token spelled out with its numbers), so stepping costs no server round trip. Views:
``step``, ``present`` (large type for a projector, the rule's formula under the round) and ``quiz``
(predict each verdict before it is revealed; a running score). The URL's hash keeps the round and
the view (``#round=3&view=quiz``). No network access is needed to open the file: every script and
style is inline. Only chain rounds are drawn in full; a tree round shows its walk's checks.
"""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

from .trace import Trace

TEMPLATE = Path(__file__).with_name("player_template.html")


def embedded_json(trace: Trace) -> str:
    """The trace as JSON with no ``<`` left in it (written ``\\u003c``, still the same JSON), so no text in
    it can end or comment out its <script> element."""
    return trace.to_json().replace("<", "\\u003c")


def lesson_title(trace: Trace) -> str:
    return f"specviz lesson · {trace.models['target']} ← {trace.models['draft']} · {trace.config.rule} · γ = {trace.config.gamma}"


VIEWS = ("step", "present", "quiz")


def lesson_html(trace: Trace, title: str | None = None, view: str = "step", round_index: int = 1) -> str:
    """The standalone lesson: the player template with this trace, its title and the view and round it
    opens on (a hash in the file's URL, ``#round=3&view=quiz``, takes precedence)."""
    if view not in VIEWS:
        raise ValueError(f"view must be one of {', '.join(VIEWS)}; got {view!r}")
    fills = {"__TITLE__": html.escape(title or lesson_title(trace)), "__TRACE_JSON__": embedded_json(trace),
             "__START__": json.dumps({"view": view, "round": int(round_index)})}
    # one pass, so text inside a filled value is never taken for a placeholder
    return re.sub("|".join(fills), lambda match: fills[match.group(0)], TEMPLATE.read_text(encoding="utf-8"))
