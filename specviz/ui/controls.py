"""The sidebar shared by every page, generated from the config's fields and the registries, and the
URL that mirrors it (a copied link reopens the same state)."""

from __future__ import annotations

import math

import streamlit as st
from streamlit.errors import StreamlitAPIException

from specviz.analysis.defaults import PAIR_DEFAULTS, follow_pair
from specviz.config import ConfigError, DecodeConfig, field_params, field_type
from specviz.drafters.registry import CLAIMED_FIELDS, drafter_entry, rule_entry
from specviz.models.published import FETCH_COMMAND, PUBLISHED, fetched
from specviz.ui.navigation import navigation
from specviz.ui.presets import CUSTOM_PAIR, DEFAULT_PROMPT, PAIR_PRESETS, PROMPT_PRESETS, pair_label, pair_option
from specviz.ui.work import app_defaults, pair_defaults
from specviz.urlstate import format_value, parse_query, parse_value, to_query

# a Material icon: "✓" is no emoji to streamlit, which then looks for a file of that name on every page run
PAGE_CONFIG = dict(page_title="specviz: speculative decoding, seen", page_icon=":material/check_circle:", layout="wide")


def draw_shared_sidebar() -> None:
    """Draw the sidebar once per run (app.py does it before running the page) and keep its result."""
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
            st.error("This page is part of specviz: start the app with `streamlit run app.py`.")
            st.stop()
        st.rerun()
    config, prompt, defaults = (ss.get("sv_config"), ss.get("sv_prompt", DEFAULT_PROMPT),
                                ss.get("sv_defaults") or app_defaults())
    if config is not None:
        write_url(config, prompt, ss.get("round", 1), defaults)
    return config, prompt, defaults


UNSET = "unset"  # a choice widget's stand-in for a None choice (streamlit draws a None selection as empty)


def widget_value(name: str, value):
    """A config value as its widget holds it (the text box of skip_layers holds text; a None choice, UNSET)."""
    widget = field_params()[name].widget
    if widget == "text":
        return format_value(value)
    return UNSET if value is None and widget in ("radio", "select") else value


def config_value(name: str, widget_state):
    """A widget's state as the config field's value (text is parsed; numbers keep the field's type)."""
    if widget_state == UNSET and field_params()[name].widget in ("radio", "select"):
        return None
    if field_params()[name].widget == "text":
        try:
            return parse_value(name, widget_state)
        except ValueError as exc:
            raise ConfigError(f"{field_params()[name].label}: malformed value {widget_state!r}") from exc
    return float(widget_state) if field_type(name) == "float" else widget_state


def init_state_from_url(defaults: DecodeConfig) -> None:
    """On a session's first run, seed every widget from the URL (bad values: message + default)."""
    if st.session_state.get("sv_initialized"):
        return
    query = st.query_params.to_dict()
    state = parse_query(query, defaults)
    kept = {name: getattr(defaults, name) for name in field_params() if unshowable(name, getattr(state.config, name))}
    c = state.config.replace(**kept)
    own = pair_defaults(c.target, c.draft, defaults.device)
    if own is not None:
        c = c.replace(**{name: getattr(own, name) for name in PAIR_DEFAULTS if name not in query})
    messages = list(state.messages) + [f"{name}={format_value(getattr(state.config, name))} in the link cannot be set "
                                       f"on its control; using the default {format_value(value)}"
                                       for name, value in kept.items()]
    ss = st.session_state
    ss.update({name: widget_value(name, getattr(c, name)) for name, p in field_params().items() if p.widget != "none"})
    ss.update(
        sv_initialized=True, url_messages=messages,
        sv_pair_defaults={name: getattr(c, name) for name in PAIR_DEFAULTS if name not in query},
        pair=pair_label(c.target, c.draft),
        custom_target=c.target, custom_draft=c.draft or "",
        prompt=state.prompt if state.prompt is not None else DEFAULT_PROMPT, round=state.round,
    )
    read = fields_read(ss)
    ss.url_messages += [f"{name}={query[name]} in the link is not used by the {c.rule} rule and the {c.drafter} "
                        "drafter; it applies once a setting that reads it is chosen"
                        for name in field_params() if name in query and not field_enabled(name, ss, read)]


def _apply_pair_defaults(device: str) -> None:
    ss = st.session_state
    values, ss.sv_pair_defaults = follow_pair({name: ss.get(name) for name in PAIR_DEFAULTS},
                                              ss.get("sv_pair_defaults", {}), pair_defaults(*chosen_pair(ss), device))
    ss.update(values)


def _apply_prompt_preset() -> None:
    st.session_state.prompt = PROMPT_PRESETS[st.session_state.prompt_preset]


def chosen_pair(ss) -> tuple[str, str | None]:
    """(target, draft or None) as the sidebar's pair choice (or its custom text boxes) names them."""
    if ss.pair == CUSTOM_PAIR:
        return ss.custom_target.strip(), ss.custom_draft.strip() or None
    return PAIR_PRESETS[ss.pair]


def fields_read(ss) -> set[str]:
    """The config fields the chosen drafter and rule read (looked up once per page run: every field asks)."""
    return set(drafter_entry(ss.drafter).reads(bool(chosen_pair(ss)[1]))) | set(rule_entry(ss.rule).fields)


def field_enabled(name: str, ss, read: set[str]) -> bool:
    """A widget is enabled when the chosen drafter or rule reads its field (``read``: :func:`fields_read`; fields no
    registry entry claims are always on) and its Param's ``when`` condition holds."""
    described = field_params()[name]
    condition = described.when is None or ss.get(described.when[0]) == described.when[1]
    return (name not in CLAIMED_FIELDS or name in read) and condition


NUMBER_MAX = 2**53 - 1  # the largest integer a browser's number box holds exactly


def shown_range(name: str, value) -> tuple[float, float]:
    """A slider's range: the field's ``shown`` range (or its bounds), widened to hold ``value`` when the config
    accepts a value outside it (a link's ``temperature=5`` opens on a slider that reaches 5)."""
    p = field_params()[name]
    low, high = p.shown or (p.low, p.high)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        low, high = min(low, value), max(high, value)
    return low, high


def unshowable(name: str, value) -> bool:
    """A valid value no widget can hold: infinite on a slider, past what a number box holds exactly."""
    widget = field_params()[name].widget
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    return number and ((widget == "slider" and not math.isfinite(value)) or (widget == "number" and value > NUMBER_MAX))


def draw_field(container, name: str, ss) -> None:
    """The widget a config field's Param describes, keyed by the field's name."""
    p = field_params()[name]
    common = dict(key=name, help=p.help)
    if p.widget in ("radio", "select"):
        choices = [widget_value(name, c) for c in p.choices]
        options = choices + ([ss[name]] if ss.get(name) not in choices else [])
        labels = dict(zip(choices, p.choice_labels))
        draw = container.radio if p.widget == "radio" else container.selectbox
        extra = dict(horizontal=True) if p.widget == "radio" else {}
        draw(p.label, options, format_func=lambda v: labels.get(v, str(v)), **extra, **common)
    elif p.widget == "slider":
        low, high = shown_range(name, ss.get(name))
        if p.step is not None:
            container.slider(p.label, float(low), float(high), step=p.step, **common)
        else:
            container.slider(p.label, int(low), int(high), **common)
    elif p.widget == "number":
        container.number_input(p.label, min_value=int(p.low), max_value=min(int(p.high), NUMBER_MAX), step=1, **common)
    elif p.widget == "text":
        container.text_input(p.label, placeholder="default", **common)
    elif p.widget == "checkbox":
        container.checkbox(p.label, **common)


def draw_if_read(container, name: str, ss, read: set[str]) -> None:
    """Draw a field's widget when the chosen drafter and rule read it (``read``); otherwise keep its value out of
    sight (streamlit forgets the state of a widget a run does not draw, so it is kept as plain session state)."""
    if field_enabled(name, ss, read):
        draw_field(container, name, ss)
    else:
        ss[name] = ss[name]


def sidebar_controls(defaults: DecodeConfig) -> tuple[DecodeConfig | None, str]:
    """Render the sidebar; return the chosen config (None with a message when it is invalid) and prompt.

    Every config widget is drawn from its field's Param (label, range, help) and enabled by the
    registry entries of the chosen drafter and rule; only the model pair and the prompt are drawn here.
    """
    init_state_from_url(defaults)
    ss = st.session_state
    sb = st.sidebar
    sb.header("Models")
    sb.selectbox("Model pair", list(PAIR_PRESETS), key="pair", format_func=pair_option,
                 on_change=_apply_pair_defaults, args=(defaults.device,),
                 help="What each pair needs: ✓ runs here; ⤓ fetch it once with the command shown; ☁ a model hub, "
                      "which this machine cannot reach")
    sb.caption("✓ runs here · ⤓ fetch once · ☁ needs a model hub")
    if ss.pair == CUSTOM_PAIR:
        sb.text_input("Target model (hub id or directory)", key="custom_target")
        sb.text_input("Draft model (hub id or directory)", key="custom_draft")
    target, draft = chosen_pair(ss)
    missing = [PUBLISHED[spec].name for spec in (target, draft) if spec in PUBLISHED and not fetched(PUBLISHED[spec])]
    if missing:
        sb.info(f"{' and '.join(missing)} not fetched on this machine yet: run `{FETCH_COMMAND}` once (about 1.6 GB), "
                "then reload. (Where a model hub is reachable they load from it instead.)")
    drawn, read = [name for name, p in field_params().items() if p.widget != "none"], fields_read(ss)
    for section in ("Models", "Verification"):
        if section != "Models":
            sb.header(section)
        for name in drawn:
            if field_params()[name].section == section:
                draw_if_read(sb, name, ss, read)
    sb.header("Prompt")
    sb.selectbox("Preset", list(PROMPT_PRESETS), key="prompt_preset", index=None, placeholder="Pick a preset prompt…",
                 on_change=_apply_prompt_preset)
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


def write_url(config: DecodeConfig, prompt: str, round_index: int, defaults: DecodeConfig,
              extra: dict[str, str] | None = None) -> None:
    """Mirror the state into the address bar so a copied link reopens this exact view (``extra``: a
    page's own parameters, such as the lesson player's view)."""
    query = {**to_query(config, prompt, round_index, defaults), **(extra or {})}
    if query != st.query_params.to_dict():
        st.query_params.from_dict(query)
