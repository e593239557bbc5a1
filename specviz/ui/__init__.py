"""Streamlit glue (the only package that imports streamlit).

``navigation``: the page list; ``presets``: the model pairs and prompts offered; ``work``: models loaded once and
this machine's defaults; ``waiting``: every page's computation shared by all sessions, and what a page shows while
it waits; ``controls``: the sidebar generated from the config's fields and
the registries, mirrored in the URL; ``views``: the trace's summary line, the round a link names and the lesson
player that steps the rounds in the browser (:mod:`specviz.presentation.player`). Pages use these through
``from specviz import ui``.
"""

from specviz.ui.controls import (
    PAGE_CONFIG,
    UNSET,
    config_value,
    draw_field,
    draw_shared_sidebar,
    field_enabled,
    init_state_from_url,
    shared_controls,
    sidebar_controls,
    widget_value,
    write_url,
)
from specviz.ui.navigation import PAGES, navigation
from specviz.ui.presets import CUSTOM_PAIR, DEFAULT_PROMPT, EMBEDDED_PAIR, PAIR_PRESETS, PROMPT_PRESETS
from specviz.ui.views import (
    linked_round,
    pair_defaults_text,
    precision_caption,
    roofline_panel,
    show_player,
    speed_story_text,
    summary_line,
)
from specviz.ui.waiting import get_trace, let_the_hall_run_first, place_message, shared_result, shared_work
from specviz.ui.work import (
    app_defaults,
    cached_pair,
    describe_failure,
    page_pair,
    pair_defaults,
    pair_for,
    show_user_errors,
    trace_key,
)

__all__ = [
    "CUSTOM_PAIR", "DEFAULT_PROMPT", "EMBEDDED_PAIR", "PAGES", "PAGE_CONFIG", "PAIR_PRESETS", "PROMPT_PRESETS",
    "UNSET", "app_defaults", "cached_pair", "config_value", "describe_failure", "draw_field", "draw_shared_sidebar",
    "field_enabled", "get_trace", "init_state_from_url", "let_the_hall_run_first", "linked_round", "navigation",
    "page_pair", "pair_defaults", "pair_defaults_text", "pair_for", "place_message", "precision_caption",
    "roofline_panel", "shared_controls", "shared_result", "shared_work", "show_player", "show_user_errors",
    "sidebar_controls", "speed_story_text", "summary_line", "trace_key", "widget_value", "write_url",
]
