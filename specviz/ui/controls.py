"""The sidebar shared by every page, generated from the config's fields and the registries, and the
URL that mirrors it (a copied link reopens the same state)."""

from __future__ import annotations

import time
from typing import Literal, TypedDict
from urllib.parse import urlencode, urljoin

import streamlit as st
from streamlit.delta_generator import DeltaGenerator
from streamlit.errors import StreamlitAPIException

from specviz.analysis.claims import a_target
from specviz.analysis.defaults import PAIR_DEFAULTS, at_precision, follow_pair
from specviz.analysis.replay import MeasuredDefaults
from specviz.config import DecodeConfig, field_params
from specviz.drafters.modules import on_this_machine
from specviz.limits import shipped_weights_fit
from specviz.models.published import FETCH_COMMAND, PUBLISHED, fetched
from specviz.registry.drafter_settings import MachineChoice
from specviz.registry.drafters import drafter_entry, settings_groups
from specviz.serving.pairs import (
    app_defaults,
    app_device,
    defaults_known,
    lesson_block,
    loaded_target,
    measure_in_background,
    pair_defaults,
)
from specviz.serving.pool import shared_work
from specviz.serving.urlstate import TEACHER, to_query
from specviz.settings import ConfigError
from specviz.ui.fields import chosen_pair, config_value, draw_if_read, fields_read, widget_value
from specviz.ui.navigation import LESSON_VIEWS, navigation
from specviz.ui.offers import own_key
from specviz.ui.opening import init_state_from_url
from specviz.ui.presets import CUSTOM_PAIR, DEFAULT_PROMPT, PAIR_PRESETS, PROMPT_PRESETS, pair_option
from specviz.ui.scheduling import defer
from specviz.ui.state import Session, field_state, page_key, session, set_field_states
from specviz.ui.teacher_links import remember_teacher_key, show_students_link


class PageConfig(TypedDict):
    page_title: str
    page_icon: str
    layout: Literal["centered", "wide"]


# a Material icon: "✓" is no emoji to streamlit, which then looks for a file of that name on every page run
PAGE_CONFIG = PageConfig(
    page_title="specviz: speculative decoding, seen", page_icon=":material/check_circle:", layout="wide"
)


def draw_shared_sidebar() -> None:
    """Choose the sidebar's config once per run, for the page that runs next (app.py calls it before the page), and
    keep it; the widgets are drawn after the page's first contentful paint (:mod:`specviz.ui.scheduling`), in the
    sidebar's place reserved here, above anything the page adds there. A machine's first start measures its defaults
    (the embedded pair's passes and acceptance: a minute or two) in the background once the sessions' work is done, so
    its first round is not held up (:func:`~specviz.serving.pairs.measure_in_background`: it waits for the pool to have
    finished a first computation, the visitor's round, or ``FIRST_WORK_WAIT_S``, then for it to be idle); the sidebar
    says so meanwhile."""
    device = app_device()
    if not defaults_known(device):
        pool, asked = shared_work(), time.monotonic()

        def busy() -> bool:
            first_pending = not pool.durations and time.monotonic() - asked < FIRST_WORK_WAIT_S
            return bool(pool.running or pool.queue) or first_pending

        measure_in_background(device, busy=busy)
        st.sidebar.caption(MEASURING_NOTE)
    defaults = app_defaults()
    session.config, session.chosen_prompt = sidebar_controls(defaults, st.sidebar.container())
    session.defaults, session.sidebar_drawn = defaults, True


FIRST_WORK_WAIT_S = 120.0  # how long the machine's first measurement waits for a visitor's first computation
MEASURING_NOTE = (
    "⏳ This machine is measured once, in the background after the work on screen (the embedded pair's passes and "
    "acceptance): the pair's measured precision, block size and speed figures apply once it is done. Links written "
    "meanwhile name every one of those settings, so they open the same trace later."
)


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
    drawn, session.sidebar_drawn = session.sidebar_drawn, False
    if not drawn and not Session.config.is_set():
        try:
            navigation()
        except StreamlitAPIException:  # this page is the main script: there is no app.py run to go to
            st.error("This page is part of specviz: start the app with `streamlit run app.py` (or `specviz app`).")
            st.stop()
        st.rerun()
    config, prompt, defaults = session.config, session.chosen_prompt or DEFAULT_PROMPT, session.defaults
    defaults = defaults or app_defaults()
    if config is not None:
        write_url(config, prompt, session.round, defaults, extra=linked_view())
        if (
            not session.student
        ):  # in the sidebar, under its widgets: drawn with them, after the page's first contentful paint
            defer(lambda: draw_students_link(config, prompt, defaults))
    return config, prompt, defaults


def draw_students_link(config: DecodeConfig, prompt: str, defaults: DecodeConfig) -> None:
    """The teacher's expander with the students' quiz link of this page's settings, at the session's round; beside it,
    outside the folded expander (whose content a browser may not mount), the key this session owns its results by,
    kept in the browser's cookie from the first page on (every tab of it then owns them)."""
    with st.sidebar:
        remember_teacher_key(own_key())
    with st.sidebar.expander("Copy link for students (quiz)"):
        st.caption(
            "Opens the lesson player's quiz at this round: no verdict shows before it is answered. A student session "
            "reads the results you prepared: it starts no costly computation and measures nothing again."
        )
        query = to_query(config, prompt, session.round, defaults, student=True)
        show_students_link(students_link(query, session.round), page_key("sidebar", "students_link"))
        st.caption(
            "The address bar's link is safe to share too: the races and timings you measured or prepared stay yours "
            "(another session's Measure again is shown to it alone). **Your own link**, to keep them yours in "
            "another tab or browser (do not share it):"
        )
        own = {**to_query(config, prompt, session.round, defaults), TEACHER: own_key()}
        st.code((st.context.url or "/").split("?")[0] + "?" + urlencode(own), language=None, wrap_lines=True)


def linked_view() -> dict[str, str] | None:
    """The lesson view the link names (``view=quiz``, ``present`` or ``race``), kept in every rewrite of the link: a
    rewrite without it would leave an entry in the tab's history (streamlit pushes each new address) that opens the
    step view, so one Back would show a quiz's verdicts."""
    view = st.query_params.get("view")
    return {"view": view} if view in LESSON_VIEWS else None


def students_link(query: dict[str, str], round_index: int) -> str:
    """The quiz link of a page's settings (``query``: with ``student=1``, :data:`~specviz.serving.urlstate.STUDENT`)
    at round ``round_index`` (named even when it is the first: the sidebar's box rewrites it as the player steps):
    the lesson player's quiz view on the same server (its address as the browser reached it), or a path from the
    server's root where the address is not known."""
    return (
        urljoin(st.context.url or "/", "lesson_player")
        + "?"
        + urlencode({**query, "round": str(round_index), "view": "quiz"})
    )


MOVED_NAMES = {
    "dtype": "precision",
    "gamma": "γ",
    "draft_dtype": "draft precision",
    "confidence_exit": "confidence exit",
}


def moved_settings(before: dict, after: dict) -> str:
    """The settings that moved, in one line ("γ 5 → 4, confidence exit off → 0.9"; "" where none did)."""

    def shown(name: str, value: object) -> str:
        return "off" if name == "confidence_exit" and not value else "the target's" if value is None else str(value)

    return ", ".join(
        f"{MOVED_NAMES[name]} {shown(name, before.get(name))} → {shown(name, after[name])}"
        for name in MOVED_NAMES
        if name in after and after[name] != before.get(name)
    )


def _follow(own: MeasuredDefaults | None, why: str) -> dict[str, object]:
    """The pair defaults still applied moved to ``own`` (:func:`follow_pair`), and said in the sidebar's one line."""
    before = {name: field_state(name) for name in PAIR_DEFAULTS}
    values, session.pair_defaults = follow_pair(before, session.pair_defaults, own)
    moved = moved_settings(before, values)
    session.defaults_moved = f"{why}: {moved}." if moved else ""
    return values


def _apply_pair_defaults(device: str) -> None:
    values = _follow(pair_defaults(*chosen_pair(), device), "This pair opens on its defaults measured here")
    set_field_states({**values, **open_machine_choices()})


def _apply_precision_defaults(device: str) -> None:
    """A target precision picked in the sidebar: the draft precision, γ and confidence exit that still hold the
    defaults applied before move to the pair's fastest measured for that precision (:func:`at_precision`, at least
    the lesson's block: :func:`lesson_block`), and the sidebar says what moved; the precision stays the user's, and
    nothing moves where the pair was not measured in it."""
    own, dtype = pair_defaults(*chosen_pair(), device), field_state("dtype")
    fastest = lesson_block(at_precision(own, dtype)) if own is not None else None
    values = _follow(fastest, f"The fastest measured here for {a_target(dtype)}")
    set_field_states(values)
    if values.get("draft_dtype", field_state("draft_dtype")) is None:  # the draft follows the target: said too
        followed = f"The draft runs in {dtype} too (its precision follows the target's)."
        session.defaults_moved = f"{session.defaults_moved} {followed}".strip()


def open_machine_choices() -> dict[str, object]:
    """The widgets' states that leave every machine-dependent choice open again (:class:`MachineChoice`: a new pair's
    is measured anew, on its own target)."""
    groups = [group() for group in settings_groups()]
    return {name: widget_value(name, None) for g in groups if isinstance(g, MachineChoice) for name in g.machine_fields}


def _apply_prompt_preset() -> None:
    if session.prompt_preset is not None:
        session.prompt = PROMPT_PRESETS[session.prompt_preset]


def sidebar_controls(defaults: DecodeConfig, place: DeltaGenerator | None = None) -> tuple[DecodeConfig | None, str]:
    """The sidebar: return the chosen config (None with a message when it is invalid) and prompt, read from the
    widgets' states (seeded from the link on a session's first run); the widgets themselves are drawn into ``place``
    (the sidebar by default) after the page's first contentful paint (:func:`specviz.ui.scheduling.defer`). Drawing a
    widget leaves its state as it is, so the config is the one the widgets show."""
    init_state_from_url(defaults)
    defer(lambda: draw_sidebar(place or st.sidebar, defaults))
    for message in session.link_messages:
        st.warning(message)
    target, draft = chosen_pair()
    try:
        chosen = {name: config_value(name, field_state(name)) for name in drawn_fields()}
        config = DecodeConfig(target=target, draft=draft, device=defaults.device, **chosen).validated()
    except ConfigError as exc:
        st.error(str(exc))
        return None, session.prompt
    return made_on_this_machine(config), session.prompt


def made_on_this_machine(config: DecodeConfig) -> DecodeConfig:
    """``config`` with its machine-dependent choices made (:func:`~specviz.drafters.modules.on_this_machine`) once its
    target is loaded in its precision (nothing is loaded here: until then the run makes them, and the next page run
    writes them here), and written into their widgets, so the link carries them to any other machine."""
    target = loaded_target(config)
    if target is None or target.precision != config.dtype:
        return config
    made = on_this_machine(config, target)
    chosen = [name for name in field_params() if made.value(name) != config.value(name)]
    set_field_states({name: widget_value(name, made.value(name)) for name in chosen})
    return made


def drawn_fields() -> list[str]:
    """The config fields the sidebar has a widget for."""
    return [name for name, p in field_params().items() if p.widget != "none"]


def draw_sidebar(sb: DeltaGenerator, defaults: DecodeConfig) -> None:
    """The sidebar's widgets: every config widget is drawn from its field's Param (label, range, help) and enabled
    by the registry entries of the chosen drafter and rule; only the model pair and the prompt are drawn here."""
    sb.header("Models")
    sb.selectbox(
        "Model pair",
        list(PAIR_PRESETS),
        key=Session.pair.key,
        format_func=pair_option,
        on_change=_apply_pair_defaults,
        args=(defaults.device,),
        help="What each pair needs: ✓ runs here; ⤓ fetch it once with the command shown; ☁ a model hub, "
        "which this machine cannot reach",
    )
    sb.caption("✓ runs here · ⤓ fetch once · ☁ needs a model hub")
    if session.pair == CUSTOM_PAIR:
        sb.text_input("Target model (hub id or directory)", key=Session.custom_target.key)
        sb.text_input("Draft model (hub id or directory)", key=Session.custom_draft.key)
    target, draft = chosen_pair()
    missing = [PUBLISHED[spec].name for spec in (target, draft) if spec in PUBLISHED and not fetched(PUBLISHED[spec])]
    if missing:
        sb.info(
            f"{' and '.join(missing)} not fetched on this machine yet: run `{FETCH_COMMAND}` once (about 1.6 GB), "
            "then reload. (Where a model hub is reachable they load from it instead.)"
        )
    drawn, read = drawn_fields(), fields_read()
    for section in ("Models", "Verification"):
        if section != "Models":
            sb.header(section)
        for name in drawn:
            if field_params()[name].section == section:
                changed = (lambda: _apply_precision_defaults(defaults.device)) if name == "dtype" else None
                draw_if_read(sb, name, read, changed)
        if section == "Models" and session.defaults_moved:  # what a pair or a precision picked moved, said once
            sb.info(session.defaults_moved, icon=":material/tune:")
        drafter = drafter_entry(field_state("drafter"))
        if section == "Models" and not shipped_weights_fit(
            drafter.requires_model_outputs, target, field_state("parallel_weights")
        ):
            sb.warning(
                f"The {drafter.label} drafter's shipped weights were trained on the embedded "
                f"SmolLM2-135M target only: pick another drafter for {target}."
            )
    sb.header("Prompt")
    sb.selectbox(
        "Preset",
        list(PROMPT_PRESETS),
        key=Session.prompt_preset.key,
        index=None,
        placeholder="Pick a preset prompt…",
        on_change=_apply_prompt_preset,
    )
    sb.text_area("Prompt", key=Session.prompt.key, height=120)
    for name in drawn:
        if field_params()[name].section == "Prompt":
            draw_if_read(sb, name, read)


def write_url(
    config: DecodeConfig, prompt: str, round_index: int, defaults: DecodeConfig, extra: dict[str, str] | None = None
) -> None:
    """Mirror the state into the address bar so a copied link reopens this exact view (``extra``: a
    page's own parameters, such as the lesson player's view); a student's session keeps its mark in every link."""
    pinned = () if defaults_known(config.device) else PAIR_DEFAULTS  # not measured yet: the defaults may still move
    query = {**to_query(config, prompt, round_index, defaults, student=session.student, pinned=pinned), **(extra or {})}
    if query != st.query_params.to_dict():
        st.query_params.from_dict(query)
