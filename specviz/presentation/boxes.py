"""One token's box in the seed diagrams' colour language: the colours every view and chart shares, how a token's
text shows in a box, a box and a labelled row of them (pure HTML fragments; the stylesheet is
:data:`specviz.presentation.render.CSS`)."""

from __future__ import annotations

import html
import re

# One colour language everywhere (legend, boxes, output text, bar charts).
COLORS = {
    "accepted": ("#1b5e20", "#c8e6c9"),  # (text/border, background)
    "rejected": ("#b71c1c", "#ffcdd2"),
    "correction": ("#e65100", "#ffe0b2"),
    "bonus": ("#0d47a1", "#bbdefb"),
    "draft": ("#4a148c", "#ede7f6"),
    "not_verified": ("#616161", "#eeeeee"),
    "prefix": ("#424242", "#fafafa"),
    "mask": ("#9e9e9e", "#ffffff"),
}
CONTROL_CHARACTERS = re.compile("[\x00-\x1f\x7f]")


def display_text(text: str) -> str:
    """A token as a box shows it: newlines and tabs visible, other control characters (byte-fallback
    tokens, which an SVG picture may not hold) as U+FFFD, blank tokens as open boxes."""
    shown = CONTROL_CHARACTERS.sub("\ufffd", text.replace("\n", "↵").replace("\t", "⇥"))
    if not shown.strip():
        return "␣" * max(1, len(shown))
    return shown.strip()


def token_box(
    text: str, style: str, *, struck: bool = False, mask: bool = False, title: str = "", far: bool = False
) -> str:
    """One token's box; ``far``: an older context token, left out of the projector view."""
    fg, bg = COLORS[style]
    classes = "sv-tok" + (" sv-struck" if struck else "") + (" sv-mask" if mask else "") + (" sv-far" if far else "")
    return (
        f'<span class="{classes}" style="color:{fg};border-color:{fg};background:{bg}" '
        f'title="{html.escape(title or text)}">{html.escape(display_text(text) if not mask else text)}</span>'
    )


def row_html(label: str, cells: list[str], extra_class: str = "") -> str:
    return f'<div class="sv-row {extra_class}"><div class="sv-label">{html.escape(label)}</div>{"".join(cells)}</div>'
