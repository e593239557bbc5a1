"""The sidebar shared by every page, generated from the config's fields and the registries, and the
URL that mirrors it (a copied link reopens the same state)."""

from __future__ import annotations

from typing import Literal, TypedDict
from urllib.parse import urlencode, urljoin

import streamlit as st
from streamlit.errors import StreamlitAPIException

from specviz.analysis.defaults import PAIR_DEFAULTS, follow_pair
from specviz.config import DecodeConfig, field_params
from specviz.drafters.registry import drafter_entry
from specviz.limits import shipped_weights_fit
from specviz.models.published import FETCH_COMMAND, PUBLISHED, fetched
from specviz.serving.models import MACHINE_DEFAULTS, app_defaults, app_device, pair_defaults
from specviz.serving.urlstate import format_value, parse_query, to_query
from specviz.settings import ConfigError
from specviz.ui.fields import (
    chosen_pair,
    config_value,
    draw_if_read,
    field_enabled,
    fields_read,
    unshowable,
    widget_value,
)
from specviz.ui.navigation import navigation
from specviz.ui.presets import CUSTOM_PAIR, DEFAULT_PROMPT, PAIR_PRESETS, PROMPT_PRESETS, pair_label, pair_option


class PageConfig(TypedDict):
    page_title: str
    page_icon: str
    layout: Literal["centered", "wide"]


# a Material icon: "✓" is no emoji to streamlit, which then looks for a file of that name on every page run
PAGE_CONFIG = PageConfig(
    page_title="specviz: speculative decoding, seen", page_icon=":material/check_circle:", layout="wide"
)


def draw_shared_sidebar() -> None:
    """Draw the sidebar once per run (app.py does it before running the page) and keep its result. The first run on
    a machine measures its defaults first (the embedded pair's passes: seconds), under a spinner."""
    if MACHINE_DEFAULTS.has(app_device()):
        defaults = app_defaults()
    else:
        with st.spinner("Measuring this machine once: the embedded pair's passes over 1 to 9 tokens …"):
            defaults = app_defaults()
    config, prompt = sidebar_controls(defaults)
    st.session_state.update(sv_config=config, sv_prompt=prompt, sv_defaults=defaults, sv_sidebar_drawn=True)


def shared_controls() -> tuple[DecodeConfig | None, str, DecodeConfig]:
    """The sidebar's config (None if invalid; the sidebar showed why), prompt and defaults.

    app.py draws the sidebar for every page, so its widgets keep their values whichever page is open.
    A page opened straight from a link on a freshly started server runs without app.py (streamlit's
    pages/ folder mode until the first ``st.navigation`` call); it then makes that call itself and reruns
    at once, through app.py, before drawing anything. (Drawing the sidebar from the page for that one run
    lost the prompt at the next click: the widgets then belonged to another script's run.) A page run as
    the main script has no app.py beside it, so the page list's paths do not resolve: it says how to start.
    The URL is updated here, from the page, so a copied link reopens this state on this page.
    """
    ss = st.session_state
    if not ss.pop("sv_sidebar_drawn", False) and "sv_config" not in ss:
        try:
            navigation()
        except StreamlitAPIException:  # this page is the main script: there is no app.py run to go to
            st.error("This page is part of specviz: start the app with `specviz app` (`python -m specviz app`).")
            st.stop()
        st.rerun()
    config, prompt, defaults = (
        ss.get("sv_config"),
        ss.get("sv_prompt", DEFAULT_PROMPT),
        ss.get("sv_defaults") or app_defaults(),
    )
    if config is not None:
        write_url(config, prompt, ss.get("round", 1), defaults)
        with st.sidebar.expander("Copy link for students (quiz)"):
            st.caption("Opens the lesson player's quiz at this round: no verdict shows before it is answered.")
            st.code(
                students_link(to_query(config, prompt, ss.get("round", 1), defaults)), language=None, wrap_lines=True
            )
    return config, prompt, defaults


def students_link(query: dict[str, str]) -> str:
    """The quiz link of a page's settings: the lesson player's quiz view on the same server (its address as the
    browser reached it), or a path from the server's root where the address is not known."""
    return urljoin(st.context.url or "/", "lesson_player") + "?" + urlencode({**query, "view": "quiz"})


def init_state_from_url(defaults: DecodeConfig) -> None:
    """On a session's first run, seed every widget from the URL (bad values: message + default)."""
    if st.session_state.get("sv_initialized"):
        return
    query = st.query_params.to_dict()
    state = parse_query(query, defaults)
    kept = {name: defaults.value(name) for name in field_params() if unshowable(name, state.config.value(name))}
    c = state.config.replace(**kept)
    own = pair_defaults(c.target, c.draft, defaults.device)
    if own is not None:
        c = c.replace(**{name: getattr(own, name) for name in PAIR_DEFAULTS if name not in query})
    messages = list(state.messages) + [
        f"{name}={format_value(state.config.value(name))} in the link cannot be set "
        f"on its control; using the default {format_value(value)}"
        for name, value in kept.items()
    ]
    ss = st.session_state
    ss.update({name: widget_value(name, c.value(name)) for name, p in field_params().items() if p.widget != "none"})
    ss.update(
        sv_initialized=True,
        url_messages=messages,
        sv_pair_defaults={name: c.value(name) for name in PAIR_DEFAULTS if name not in query},
        pair=pair_label(c.target, c.draft),
        custom_target=c.target,
        custom_draft=c.draft or "",
        prompt=state.prompt if state.prompt is not None else DEFAULT_PROMPT,
        round=state.round,
    )
    read = fields_read(ss)
    ss.url_messages += [
        f"{name}={query[name]} in the link is not used by the {c.rule} rule and the {c.drafter} "
        "drafter; it applies once a setting that reads it is chosen"
        for name in field_params()
        if name in query and not field_enabled(name, ss, read)
    ]


def _apply_pair_defaults(device: str) -> None:
    ss = st.session_state
    values, ss.sv_pair_defaults = follow_pair(
        {name: ss.get(name) for name in PAIR_DEFAULTS},
        ss.get("sv_pair_defaults", {}),
        pair_defaults(*chosen_pair(ss), device),
    )
    ss.update(values)


def _apply_prompt_preset() -> None:
    st.session_state.prompt = PROMPT_PRESETS[st.session_state.prompt_preset]


def sidebar_controls(defaults: DecodeConfig) -> tuple[DecodeConfig | None, str]:
    """Render the sidebar; return the chosen config (None with a message when it is invalid) and prompt.

    Every config widget is drawn from its field's Param (label, range, help) and enabled by the
    registry entries of the chosen drafter and rule; only the model pair and the prompt are drawn here.
    """
    init_state_from_url(defaults)
    ss = st.session_state
    sb = st.sidebar
    sb.header("Models")
    sb.selectbox(
        "Model pair",
        list(PAIR_PRESETS),
        key="pair",
        format_func=pair_option,
        on_change=_apply_pair_defaults,
        args=(defaults.device,),
        help="What each pair needs: ✓ runs here; ⤓ fetch it once with the command shown; ☁ a model hub, "
        "which this machine cannot reach",
    )
    sb.caption("✓ runs here · ⤓ fetch once · ☁ needs a model hub")
    if ss.pair == CUSTOM_PAIR:
        sb.text_input("Target model (hub id or directory)", key="custom_target")
        sb.text_input("Draft model (hub id or directory)", key="custom_draft")
    target, draft = chosen_pair(ss)
    missing = [PUBLISHED[spec].name for spec in (target, draft) if spec in PUBLISHED and not fetched(PUBLISHED[spec])]
    if missing:
        sb.info(
            f"{' and '.join(missing)} not fetched on this machine yet: run `{FETCH_COMMAND}` once (about 1.6 GB), "
            "then reload. (Where a model hub is reachable they load from it instead.)"
        )
    drawn, read = [name for name, p in field_params().items() if p.widget != "none"], fields_read(ss)
    for section in ("Models", "Verification"):
        if section != "Models":
            sb.header(section)
        for name in drawn:
            if field_params()[name].section == section:
                draw_if_read(sb, name, ss, read)
        on_states = drafter_entry(ss.drafter).requires_model_outputs if ss.get("drafter") else False
        if section == "Models" and not shipped_weights_fit(on_states, target, ss.get("parallel_weights")):
            sb.warning(
                f"The {drafter_entry(ss.drafter).label} drafter's shipped weights were trained on the embedded "
                f"SmolLM2-135M target only: pick another drafter for {target}."
            )
    sb.header("Prompt")
    sb.selectbox(
        "Preset",
        list(PROMPT_PRESETS),
        key="prompt_preset",
        index=None,
        placeholder="Pick a preset prompt…",
        on_change=_apply_prompt_preset,
    )
    sb.text_area("Prompt", key="prompt", height=120)
    for name in drawn:
        if field_params()[name].section == "Prompt":
            draw_if_read(sb, name, ss, read)
    for message in ss.get("url_messages", ()):
        st.warning(message)
    try:
        chosen = {name: config_value(name, ss[name]) for name in drawn}
        config = DecodeConfig(target=target, draft=draft, device=defaults.device, **chosen).validated()
    except ConfigError as exc:
        st.error(str(exc))
        return None, ss.prompt
    return config, ss.prompt


def write_url(
    config: DecodeConfig, prompt: str, round_index: int, defaults: DecodeConfig, extra: dict[str, str] | None = None
) -> None:
    """Mirror the state into the address bar so a copied link reopens this exact view (``extra``: a
    page's own parameters, such as the lesson player's view)."""
    query = {**to_query(config, prompt, round_index, defaults), **(extra or {})}
    if query != st.query_params.to_dict():
        st.query_params.from_dict(query)
