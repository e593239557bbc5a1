"""A shared link never crashes a page: for every config field a link can set, its default, both bounds the config
accepts and one value beyond each, the page ends with no exception (a fallback message is allowed)."""

from __future__ import annotations

import math

import pytest

from specviz import ui
from specviz.config import DecodeConfig, field_params
from specviz.serving.urlstate import format_value, url_fields

from .test_app import make_app

pytestmark = [pytest.mark.slow]


def fuzz_values(name: str) -> list[str]:
    """The default, the accepted bounds and a value past each, as a link spells them."""
    p, default = field_params()[name], DecodeConfig().value(name)
    values = [default]
    if p.choices and isinstance(default, str):
        values += [p.choices[0], p.choices[-1], "no-such-" + name]
    elif isinstance(default, bool):
        values += [True, False, "maybe"]
    elif p.low is not None:
        step = 1 if isinstance(p.low, int) and isinstance(p.high, int) else 0.01
        low = p.low + (1e-6 if p.low_open else 0)
        values += [low, p.low - step]
        values += [p.high] + ([p.high + step] if math.isfinite(p.high) else [])
    return [v if isinstance(v, str) else format_value(v) for v in values]


CASES = [(name, value) for name in url_fields() if field_params()[name].widget != "none" for value in fuzz_values(name)]


@pytest.mark.parametrize(("name", "value"), CASES)
def test_every_value_a_link_may_carry_opens_the_round_view(tiny_params, name, value):
    at = make_app({**tiny_params, "max_new_tokens": "4", name: value}).run()
    assert not at.exception, (name, value, at.exception)


@pytest.mark.parametrize("page", [p.script for p in ui.PAGES])
@pytest.mark.parametrize("side", ["high", "beyond"])
def test_every_page_opens_on_links_at_and_past_the_bounds(tiny_params, page, side):
    """Every field at its upper accepted bound (or past it) in one link, on every page: the sidebar they share and the
    page's own use of the values (a page may refuse the whole link with a message, never with a traceback)."""
    extremes = {}
    for name in url_fields():
        if field_params()[name].widget == "none" or field_params()[name].low is None:
            continue
        values = fuzz_values(name)
        extremes[name] = values[3] if side == "high" or len(values) < 5 else values[4]
    at = make_app({**tiny_params, **extremes, "max_new_tokens": "4"}).run()
    at.switch_page(f"pages/{page}.py").run()
    assert not at.exception, (page, at.exception)
