"""The race in the browser: both lanes' measured timestamps replayed on one clock, with no server round trip.

A :class:`~specviz.analysis.race.Race` is embedded once as JSON in a self-contained fragment (``race_template.html``:
its markup, style and script); the page's script replays the arrivals at the times they were measured (or slowed
down), draws each lane's text as it grows (a verified block lands at once, a rejected draft struck for a moment
before the target's correction), the lanes' ticks on one timeline with each round's drafting and verification bars,
a rolling acceptance gauge, the share of time spent drafting, and at the finish the measured speedup and how the
texts compare. The same fragment is the Race page, a view of the lesson player and a standalone file.
"""

from __future__ import annotations

import dataclasses
import html
import json
from pathlib import Path

from specviz.analysis.race import Race
from specviz.presentation.render import script_safe

TEMPLATE = Path(__file__).with_name("race_template.html")

# the standalone page's keys: space starts (and restarts) the race, from the page around a frame too
KEYS = """<script>
(function () {
  const race = document.querySelector(".sv-race").specvizRace;
  function onKey(e) {
    const typing = ["INPUT", "SELECT", "BUTTON", "TEXTAREA"].includes(e.target.tagName);
    if (e.key !== " " || e.altKey || e.ctrlKey || e.metaKey || typing) return;
    e.preventDefault();
    race.restart();
  }
  document.addEventListener("keydown", onKey);
  try { if (window.parent !== window) window.parent.document.addEventListener("keydown", onKey); } catch (blocked) {}
})();
</script>"""


def race_json(race: Race) -> str:
    return script_safe(json.dumps(dataclasses.asdict(race), ensure_ascii=False))


def race_section(race: Race) -> str:
    """The race as an HTML fragment (markup, style, data and script) to place in any page."""
    return TEMPLATE.read_text(encoding="utf-8").replace("__RACE_JSON__", race_json(race), 1)


def race_page(race: Race, title: str | None = None) -> str:
    """The race as one self-contained HTML file: opens offline, space starts it."""
    heading = html.escape(title or f"specviz race · {race.pair}")
    return (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{heading}</title>'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        "<style>body { margin: .5rem; }</style></head><body>"
        f"{race_section(race)}{KEYS}</body></html>"
    )
