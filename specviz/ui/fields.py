"""The widget each config field becomes, generated from its :class:`~specviz.settings.Param` (label, range, help,
choices), enabled by the registry entries of the chosen drafter and rule; and the conversions between a widget's
state and the field's value."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, TypedDict

from streamlit.delta_generator import DeltaGenerator

from specviz.config import field_params, field_type
from specviz.registry.drafters import DRAFTER_ENTRIES, drafter_entry
from specviz.registry.rules import RULE_ENTRIES, rule_entry
from specviz.serving.urlstate import format_value, parse_value
from specviz.settings import ConfigError
from specviz.ui.presets import PAIR_PRESETS
from specviz.ui.state import field_state, keep_field_state, session

UNSET = "unset"  # a choice widget's stand-in for a None choice (streamlit draws a None selection as empty)


def widget_value(name: str, value: Any) -> Any:
    """A config value as its widget holds it (the text box of skip_layers holds text; a None choice, UNSET)."""
    widget = field_params()[name].widget
    if widget == "text":
        return format_value(value)
    return UNSET if value is None and widget in ("radio", "select") else value


def config_value(name: str, widget_state: Any) -> Any:
    """A widget's state as the config field's value (text is parsed; numbers keep the field's type)."""
    if widget_state == UNSET and field_params()[name].widget in ("radio", "select"):
        return None
    if field_params()[name].widget == "text":
        try:
            return parse_value(name, widget_state)
        except ValueError as exc:
            raise ConfigError(f"{field_params()[name].label}: malformed value {widget_state!r}") from exc
    return float(widget_state) if field_type(name) == "float" else widget_state


def chosen_pair() -> tuple[str, str | None]:
    """(target, draft or None) as the sidebar's pair choice (or its custom text boxes) names them."""
    preset = PAIR_PRESETS[session.pair]
    if preset is None:  # CUSTOM_PAIR: its text boxes name the pair
        return session.custom_target.strip(), session.custom_draft.strip() or None
    return preset


def fields_read() -> set[str]:
    """The config fields the chosen drafter and rule read (looked up once per page run: every field asks)."""
    drafter, rule = drafter_entry(field_state("drafter")), rule_entry(field_state("rule"))
    return set(drafter.reads(bool(chosen_pair()[1]))) | set(rule.fields)


def claimed_fields() -> set[str]:
    """The settings only some drafters or rules read (the rest are always on)."""
    drafters = {name for e in DRAFTER_ENTRIES for name in e.fields + e.own_fields}
    return drafters | {name for e in RULE_ENTRIES for name in e.fields}


def field_enabled(name: str, read: set[str]) -> bool:
    """A widget is enabled when the chosen drafter or rule reads its field (``read``: :func:`fields_read`; fields no
    registry entry claims are always on) and its Param's ``when`` condition holds."""
    described = field_params()[name]
    condition = described.when is None or field_state(described.when[0]) == described.when[1]
    return (name not in claimed_fields() or name in read) and condition


NUMBER_MAX = 2**53 - 1  # the largest integer a browser's number box holds exactly


def shown_range(name: str, value: Any) -> tuple[float, float]:
    """A slider's range: the field's ``shown`` range (or its bounds), widened to hold ``value`` when the config
    accepts a value outside it (a link's ``temperature=5`` opens on a slider that reaches 5)."""
    p = field_params()[name]
    low, high = p.shown or (p.low, p.high)
    assert low is not None and high is not None, f"{name}: a slider's Param bounds its range"
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        low, high = min(low, value), max(high, value)
    return low, high


def unshowable(name: str, value: Any) -> bool:
    """A valid value no widget can hold: infinite on a slider, past what a number box holds exactly."""
    widget = field_params()[name].widget
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    return number and ((widget == "slider" and not math.isfinite(value)) or (widget == "number" and value > NUMBER_MAX))


Changed = Callable[[], None]  # what a widget's change sets off (streamlit's on_change)


class WidgetKeys(TypedDict):
    key: str
    help: str
    on_change: Changed | None


def draw_field(container: DeltaGenerator, name: str, changed: Changed | None = None) -> None:
    """The widget a config field's Param describes, keyed by the field's name (``changed``: its on_change)."""
    p = field_params()[name]
    common = WidgetKeys(key=name, help=p.help, on_change=changed)
    if p.widget in ("radio", "select"):
        choices = [widget_value(name, c) for c in p.choices]
        options = choices + ([field_state(name)] if field_state(name) not in choices else [])
        labels = dict(zip(choices, p.choice_labels))

        def label_of(v: Any) -> str:
            return labels.get(v, str(v))

        if p.widget == "radio":
            container.radio(p.label, options, format_func=label_of, horizontal=True, **common)
        else:
            container.selectbox(p.label, options, format_func=label_of, **common)
    elif p.widget == "slider":
        low, high = shown_range(name, field_state(name))
        if p.step is not None:
            container.slider(p.label, float(low), float(high), step=p.step, **common)
        else:
            container.slider(p.label, int(low), int(high), **common)
    elif p.widget == "number":
        assert p.low is not None and p.high is not None, f"{name}: a number box's Param bounds its range"
        container.number_input(p.label, min_value=int(p.low), max_value=min(int(p.high), NUMBER_MAX), step=1, **common)
    elif p.widget == "text":
        container.text_input(p.label, placeholder="default", **common)
    elif p.widget == "checkbox":
        container.checkbox(p.label, **common)


def draw_if_read(container: DeltaGenerator, name: str, read: set[str], changed: Changed | None = None) -> None:
    """Draw a field's widget when the chosen drafter and rule read it (``read``); otherwise keep its value out of
    sight (streamlit forgets the state of a widget a run does not draw, so it is kept as plain session state).
    ``changed``: called when the user changes the widget, before the page runs again."""
    if field_enabled(name, read):
        draw_field(container, name, changed)
    else:
        keep_field_state(name)
