"""A session's state, typed, with every key listed here and nowhere else.

Streamlit keeps each widget's value in ``st.session_state`` under the widget's key, and the app keeps its own entries
beside them. Three kinds of key, one rule each:

- :class:`Session`'s attributes: the app's own entries and the sidebar's pair and prompt widgets, each typed, with
  its key (``sv_`` and the attribute's name) and the value it reads as while unset;
- a config field's widget: the field's name (the URL's parameter of the same name, :mod:`specviz.serving.urlstate`),
  read and written with :func:`field_state` and :func:`set_field_states`;
- a page's own widget: :func:`page_key` (``sv_<page>_<name>``).

No other module of the UI touches ``st.session_state``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

import streamlit as st

if TYPE_CHECKING:
    from specviz.config import DecodeConfig

T = TypeVar("T")
PREFIX = "sv_"


class Entry(Generic[T]):
    """One typed key of the session state: reads as ``unset()`` until written (reading never writes), written as
    a plain value. A mutable value read while unset is a new one: write it back to keep it."""

    def __init__(self, unset: Callable[[], T]) -> None:
        self.unset = unset
        self.key = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.key = PREFIX + name

    @overload
    def __get__(self, session: None, owner: type) -> Entry[T]: ...

    @overload
    def __get__(self, session: Session, owner: type) -> T: ...

    def __get__(self, session: Session | None, owner: type) -> T | Entry[T]:
        if session is None:  # on the class: the entry itself (its key, for a widget)
            return self
        return st.session_state[self.key] if self.key in st.session_state else self.unset()

    def __set__(self, session: object, value: T) -> None:
        st.session_state[self.key] = value

    def is_set(self) -> bool:
        return self.key in st.session_state


def _none() -> None:
    return None


def _first_round() -> int:
    return 1


class Session:
    """This browser session's entries (``session`` below is the one instance; each attribute reads and writes
    ``st.session_state`` under its own key)."""

    # the link, read on the session's first run (:func:`specviz.ui.opening.init_state_from_url`)
    initialized: Entry[bool] = Entry(bool)
    link_messages: Entry[list[str]] = Entry(list)  # what the link asked for that could not be set, and why
    round: Entry[int] = Entry(_first_round)  # the 1-based round the link names; every page's link carries it
    # per trace (:func:`specviz.ui.views.trace_id`): the quiz's rounds answered from the first on, as the lesson player
    # told them (:mod:`specviz.ui.player_place`); a student's session is shown no more of that trace
    quiz_answered: Entry[dict[str, int]] = Entry(dict)
    # a student's link (``student=1``, read once): the class's results are shown, costly work never starts here, and
    # every link the session writes carries it (the teacher's link has none)
    student: Entry[bool] = Entry(bool)
    # the key that owns the class's results this session measured or prepared first (a random one, made on first use;
    # the teacher's own link, ``teacher=<key>``, carries it to another tab): :func:`specviz.ui.offers.own_key`
    teacher_key: Entry[str] = Entry(str)
    # the sidebar: its pair and prompt widgets (the config fields' widgets: field_state)
    pair: Entry[str] = Entry(str)
    custom_target: Entry[str] = Entry(str)
    custom_draft: Entry[str] = Entry(str)
    prompt_preset: Entry[str | None] = Entry(_none)
    prompt: Entry[str] = Entry(str)
    pair_defaults: Entry[dict[str, Any]] = Entry(dict)  # the settings still on the pair's measured defaults
    defaults_moved: Entry[str] = Entry(str)  # what the last pair or precision picked moved, in one line (or "")
    # what the sidebar chose this run (its config: the widgets come after the page), for the page that runs after it
    # (:func:`specviz.ui.controls.shared_controls`)
    sidebar_drawn: Entry[bool] = Entry(bool)
    config: Entry[DecodeConfig | None] = Entry(_none)
    chosen_prompt: Entry[str | None] = Entry(_none)
    defaults: Entry[DecodeConfig | None] = Entry(_none)
    # the server's side of the session
    session_id: Entry[str] = Entry(str)  # a random id, set on the session's first wait (the queue counts sessions)
    arrived: Entry[bool] = Entry(bool)  # a first page run has begun (it may have waited for the classroom's run)
    # the teacher's lecture recording this session started (:mod:`specviz.ui.recorder`): its id on the server
    recorder: Entry[str] = Entry(str)


session = Session()
SESSION_KEYS = tuple(entry.key for entry in vars(Session).values() if isinstance(entry, Entry))


def page_key(page: str, name: str) -> str:
    """The key of a page's own widget (one page's keys never meet another's, nor the sidebar's)."""
    return f"{PREFIX}{page}_{name}"


def field_state(name: str) -> Any:
    """The state of config field ``name``'s widget (None before the widget was seeded)."""
    return st.session_state.get(name)


def set_field_states(values: Mapping[str, Any]) -> None:
    """Write the widgets' states of config fields, by field name (before the widgets are drawn in this run)."""
    st.session_state.update(values)


def keep_field_state(name: str) -> None:
    """Keep an undrawn field widget's state across the run (streamlit drops the state of a widget not drawn)."""
    st.session_state[name] = st.session_state[name]
