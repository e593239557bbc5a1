"""The lesson player: one self-contained HTML file that steps through a computed trace in the browser.

Every round of the trace is embedded once: the trace as JSON, and each round's seed drawing as HTML
made by the same pure functions the app draws with (:mod:`specviz.presentation.render`): the six rows of a
chain round; a tree round's draft iterations, the tree picture (SVG), the recursive rejection walk and
its output chain (Jeon et al. 2024). The page's own script swaps rounds and draws the p-vs-q bars, the
residual bars and the acceptance test of each drafted token with its numbers, so stepping costs no
server round trip. Views: ``step``, ``present`` (large type for a projector, the rule's formula under
the round, the whole shrunk until the round's rows and the shown card's test fit the screen) and ``quiz`` (for each
drafted token of a round: accepted, rejected or never checked, before its verdicts are revealed; a running score; a
tab opened on the quiz keeps it, and its other views closed, until every question is answered). The URL's hash
keeps the round and the view (``#round=3&view=quiz``); inside the app (an ``about:srcdoc`` frame of the
app's origin) the player writes the round into the page's own address instead, so a copied link reopens it, and
tells the page where it is (:mod:`specviz.ui.player_place`), so the next page's link carries it.
A round downloads as SVG or PNG for slides. No network access is needed to open the file: every script and
style is inline.
"""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

from specviz.analysis.race import Race
from specviz.engine.trace import Round, Trace
from specviz.presentation import render, tree_drawing
from specviz.presentation.race import race_section
from specviz.presentation.render import script_safe
from specviz.registry.rules import rule_entry
from specviz.serving.urlstate import VIEWS

TEMPLATE = Path(__file__).with_name("player_template.html")


def embedded_json(trace: Trace) -> str:
    return script_safe(trace.to_json())


def round_drawing(trace: Trace, rnd: Round) -> dict[str, str]:
    """One round's seed drawing: ``rows`` (HTML) and, for a tree round, ``svg`` (the tree alone, for export)."""
    origin = render.drafted_from_html(trace, rnd)
    if rnd.tree is None:
        return {"rows": origin + render.round_rows_html(trace, rnd)}
    svg = tree_drawing.tree_svg(rnd)
    drafted = (
        "<h4>Where each drafted token came from</h4>" + tree_drawing.sources_html(rnd)
        if tree_drawing.mixes_sources(rnd)
        else "<h4>Draft iterations (one draft forward pass each)</h4>" + tree_drawing.tree_bands_html(rnd)
    )
    rows = (
        origin
        + drafted
        + f"<h4>The draft tree (accepted path in green); ONE target pass scored all {len(rnd.tree.nodes) - 1} "
        f"drafted nodes</h4>{svg}<h4>{rule_entry(trace.config.rule).tree_walk}</h4>"
        + tree_drawing.rrs_flow_html(rnd)
        + tree_drawing.output_chain_html(rnd)
    )
    return {"rows": rows, "svg": svg}


def bold_markdown(text: str) -> str:
    """``**x**`` as <b>x</b> (the summary line's markdown, in the page's HTML)."""
    return re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", text)


def lesson_title(trace: Trace) -> str:
    return (
        f"specviz lesson · {trace.models['target']} ← {trace.models['draft']} · {rule_entry(trace.config.rule).label} "
        f"· γ = {trace.config.gamma}"
    )


def lesson_html(
    trace: Trace, title: str | None = None, view: str = "step", round_index: int = 1, race: Race | None = None
) -> str:
    """The standalone lesson: the player template with this trace, its title and the view and round it
    opens on (a hash in the file's URL, ``#round=3&view=quiz``, takes precedence)."""
    return opened_at(lesson_page(trace, title, race), view, round_index)


def opened_at(page: str, view: str, round_index: int, answered: int = 0) -> str:
    """A :func:`lesson_page` opening on ``view`` and round ``round_index``: the one part that differs between the
    sessions showing one trace, so the page itself is built once. ``answered``: the quiz's rounds answered from the
    first on, as the server was last told (the player tells it again whenever its own count differs)."""
    if view not in VIEWS:
        raise ValueError(f"view must be one of {', '.join(VIEWS)}; got {view!r}")
    start = json.dumps({"view": view, "round": int(round_index), "answered": int(answered)})
    return page.replace(START_TAG.format(START_PLACEHOLDER), START_TAG.format(start), 1)


START_PLACEHOLDER = "__START__"
START_TAG = '<script id="start" type="application/json">{}</script>'  # no "<" in the trace's JSON: matched once


def lesson_page(trace: Trace, title: str | None = None, race: Race | None = None) -> str:
    """The lesson player for this trace with its start still to fill in (:func:`opened_at`), carrying ``race`` (the
    race of its settings, :mod:`specviz.presentation.race`) as its Race view when one was measured."""
    drawings = [round_drawing(trace, rnd) for rnd in trace.rounds]
    rule = rule_entry(trace.config.rule)
    fills = {
        "__TITLE__": html.escape(title or lesson_title(trace)),
        "__TRACE_JSON__": embedded_json(trace),
        "__DRAWINGS_JSON__": script_safe(json.dumps(drawings)),
        "__SEED_CSS__": render.CSS,
        "__LEGEND__": render.legend_html(rule),
        "__BAR_LEGEND__": rule.chart_legend,
        "__RACE__": race_section(race) if race else "",
        "__SUMMARY__": bold_markdown(html.escape(render.summary_line(trace))),
        "__LABELS__": script_safe(
            json.dumps(
                {
                    "correction": rule.correction,
                    "bonus": rule.bonus,
                    "formula": rule.formula.format(**trace.config.flat()),
                    "test": rule.test,
                }
            )
        ),
    }
    # one pass, so text inside a filled value is never taken for a placeholder; the start tag is left as it is
    return re.sub("|".join(fills), lambda match: fills[match.group(0)], TEMPLATE.read_text(encoding="utf-8"))
