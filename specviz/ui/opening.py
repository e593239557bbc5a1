"""What a session opens on: the link's settings seeded into the sidebar's widgets on its first run, and a message
for each value the link names that cannot be set or that the chosen drafter and rule do not read.

The link's parameters are parsed by :mod:`specviz.serving.urlstate` (pure); here they become widget states
(:mod:`specviz.ui.state`).
"""

from __future__ import annotations

import uuid

import streamlit as st

from specviz.analysis.defaults import PAIR_DEFAULTS
from specviz.config import DecodeConfig, field_params
from specviz.serving.pairs import pair_defaults
from specviz.serving.urlstate import format_value, parse_query
from specviz.ui.fields import field_enabled, fields_read, unshowable, widget_value
from specviz.ui.presets import DEFAULT_PROMPT, pair_label
from specviz.ui.state import session, set_field_states
from specviz.ui.teacher_links import remembered_teacher_key


def init_state_from_url(defaults: DecodeConfig) -> None:
    """On a session's first run, seed every widget from the link; what the link asked for that cannot be set
    becomes a message (and the default)."""
    if session.initialized:
        return
    query = st.query_params.to_dict()
    state = parse_query(query, defaults)
    config, unshown = opening_config(state.config, query, defaults)
    seed_widgets(config, state.prompt if state.prompt is not None else DEFAULT_PROMPT, state.round)
    session.student = state.student
    if not state.student:  # the key that owns what this session measures, set before anything can be measured
        session.teacher_key = state.teacher or remembered_teacher_key() or uuid.uuid4().hex
    session.pair_defaults = {name: config.value(name) for name in PAIR_DEFAULTS if name not in query}
    session.link_messages = [
        *state.messages,
        *(
            f"{name}={format_value(state.config.value(name))} in the link cannot be set on its control; using the "
            f"default {format_value(value)}"
            for name, value in unshown.items()
        ),
        *(
            f"{name}={query[name]} in the link is not used by the {config.rule} rule and the {config.drafter} "
            "drafter; it applies once a setting that reads it is chosen"
            for name in unread_fields(query)
            if name not in state.ignored  # said once: ignored, not "applies once a setting reads it"
        ),
    ]
    session.initialized = True


def opening_config(linked: DecodeConfig, query: dict[str, str], defaults: DecodeConfig) -> tuple[DecodeConfig, dict]:
    """The config the sidebar opens on: the link's, the values no widget can hold set back to the defaults (also
    returned, to say so), and the settings the link leaves out on its pair's measured defaults."""
    unshown = {name: defaults.value(name) for name in field_params() if unshowable(name, linked.value(name))}
    config = linked.replace(**unshown)
    own = pair_defaults(config.target, config.draft, defaults.device)
    if own is not None:
        config = config.replace(**{name: getattr(own, name) for name in PAIR_DEFAULTS if name not in query})
    return config, unshown


def seed_widgets(config: DecodeConfig, prompt: str, round_index: int) -> None:
    """Every sidebar widget's state from ``config`` and the link's prompt and round (before the widgets are drawn)."""
    drawn = [name for name, p in field_params().items() if p.widget != "none"]
    set_field_states({name: widget_value(name, config.value(name)) for name in drawn})
    session.pair = pair_label(config.target, config.draft)
    session.custom_target, session.custom_draft = config.target, config.draft or ""
    session.prompt, session.round = prompt, round_index


def unread_fields(query: dict[str, str]) -> list[str]:
    """The settings the link sets that neither the chosen drafter nor the rule reads (after :func:`seed_widgets`)."""
    read = fields_read()
    return [name for name in field_params() if name in query and not field_enabled(name, read)]
