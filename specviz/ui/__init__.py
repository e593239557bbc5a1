"""Streamlit glue (the only package that imports streamlit).

``app``: the main script's code (the checkout's top-level ``app.py`` and ``pages/`` start it); ``pages/``: one
script per page; ``navigation``: the page list; ``presets``: the model pairs and prompts offered; ``state``: the
session's state, typed, every key listed; ``opening``: what a session opens on (its link); ``controls``: the
sidebar, mirrored in the URL; ``fields``: the widget each config field becomes; ``waiting``: what a page shows while
the work every session shares runs (:mod:`specviz.serving`); ``offers``: a costly work's estimate and who may start it
(a student's session may not); ``racing``: the race and the one speed figure every
page quotes; ``views``: the trace's summary line, the round a link names and the lesson player that steps the rounds
in the browser (:mod:`specviz.presentation.player`). Pages use these through ``from specviz import ui``.
"""

from specviz.presentation.render import summary_line
from specviz.ui.controls import (
    PAGE_CONFIG,
    draw_shared_sidebar,
    shared_controls,
    sidebar_controls,
    write_url,
)
from specviz.ui.fields import UNSET, config_value, draw_field, field_enabled, widget_value
from specviz.ui.navigation import PAGES, navigation, open_lesson_view
from specviz.ui.offers import may_start, measure_again_hint
from specviz.ui.opening import init_state_from_url
from specviz.ui.presets import CUSTOM_PAIR, DEFAULT_PROMPT, EMBEDDED_PAIR, PAIR_PRESETS, PROMPT_PRESETS
from specviz.ui.racing import race_link, raced, show_headline, show_race_figure
from specviz.ui.scheduling import scheduled_run, stop_page
from specviz.ui.views import (
    answered_rounds,
    fastest_note,
    hold_for_quiz,
    hold_students_quiz,
    linked_round,
    pair_defaults_text,
    precision_caption,
    prediction_story_text,
    profiles_here,
    roofline_panel,
    show_player,
)
from specviz.ui.waiting import (
    get_trace,
    let_the_classroom_run_first,
    measured_again,
    page_pair,
    shared_result,
    show_user_errors,
)

__all__ = [
    "CUSTOM_PAIR",
    "DEFAULT_PROMPT",
    "EMBEDDED_PAIR",
    "PAGES",
    "PAGE_CONFIG",
    "PAIR_PRESETS",
    "PROMPT_PRESETS",
    "UNSET",
    "answered_rounds",
    "config_value",
    "draw_field",
    "draw_shared_sidebar",
    "fastest_note",
    "field_enabled",
    "get_trace",
    "init_state_from_url",
    "let_the_classroom_run_first",
    "linked_round",
    "may_start",
    "measure_again_hint",
    "measured_again",
    "navigation",
    "open_lesson_view",
    "page_pair",
    "pair_defaults_text",
    "precision_caption",
    "prediction_story_text",
    "profiles_here",
    "hold_for_quiz",
    "hold_students_quiz",
    "race_link",
    "raced",
    "roofline_panel",
    "shared_controls",
    "shared_result",
    "show_headline",
    "show_race_figure",
    "show_player",
    "show_user_errors",
    "sidebar_controls",
    "stop_page",
    "summary_line",
    "scheduled_run",
    "widget_value",
    "write_url",
]
