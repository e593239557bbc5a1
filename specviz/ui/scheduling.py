"""A page run's turns (:mod:`specviz.serving.scheduler`) and the sidebar drawn after the page's first contentful paint.

The main script builds a page in turns: :func:`scheduled_run` waits for a first-contentful-paint turn; the sidebar's
config is chosen first (the page needs it) but its widgets are only reserved a place (:func:`defer`) and drawn after
the page; :func:`painted`, called once the page's main view is out (the lesson player), ends the first contentful
paint, and the rest of the run waits for a rest turn. A run about to block (:func:`waiting`: a shared computation, a
pair loading) draws the sidebar first, so its user can change a setting meanwhile, and holds no turn while it blocks.
Called outside a turn (a fragment's rerun, a page run without the main script), these do nothing but draw what is
deferred.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import threading
from collections.abc import Callable, Iterator
from typing import NoReturn

import streamlit as st
from streamlit.runtime.scriptrunner_utils.exceptions import RerunException

from specviz.serving.scheduler import SCHEDULER


class _Run(threading.local):
    """This thread's page run: whether it holds a turn, whether its first contentful paint is out, what waits to be
    drawn."""

    held = False
    first_contentful_paint = True
    deferred: tuple[Callable[[], None], ...] = ()


_run = _Run()


@contextlib.contextmanager
def scheduled_run() -> Iterator[None]:
    """The main script's run, in turns: a first contentful paint's turn now; at the end what is deferred is drawn (also
    when the page failed, so the sidebar's widgets keep their values; a page that stops calls :func:`stop_page`, as
    after ``st.stop()`` streamlit draws nothing), in a rest turn if the page marked no
    paint (the page was its first contentful paint); then the turn ends. A rerun requested meanwhile draws it itself."""
    _run.held, _run.first_contentful_paint, _run.deferred = False, True, ()
    _take(first_contentful_paint=True)
    try:
        yield
    except RerunException:
        raise
    except BaseException:
        _draw_deferred(after_the_paint=True)
        raise
    else:
        _draw_deferred(after_the_paint=True)
    finally:
        _give_back()


def defer(draw: Callable[[], None]) -> None:
    """Draw ``draw()`` after the page's first contentful paint (before the run blocks, at the latest at its end), after
    what was deferred before it; outside a turn, now. It is drawn in the context it was deferred from (Python's context
    variables, where streamlit keeps the script a widget belongs to): the main script's sidebar widgets stay every
    page's, as if drawn before the page (drawn from inside a page run, they would be that page's own, and streamlit
    drops a page's widgets when another page opens)."""
    if _run.held:
        _run.deferred += (functools.partial(contextvars.copy_context().run, draw),)
    else:
        draw()


def painted() -> None:
    """The page's main view is out: the rest of the run waits for a rest turn (once no first contentful paint waits)."""
    if _run.held and _run.first_contentful_paint:
        _run.first_contentful_paint = False
        _give_back()
        _take(first_contentful_paint=False)


def stop_page() -> NoReturn:
    """End the page's run here, what is deferred drawn first: after ``st.stop()`` streamlit draws nothing more, and
    a sidebar left undrawn would drop its widgets' states (the next page would open with no settings)."""
    _draw_deferred(after_the_paint=True)
    st.stop()


@contextlib.contextmanager
def waiting() -> Iterator[None]:
    """A blocking wait: what is deferred is drawn first (a user can change a setting meanwhile), and the run holds
    no turn while it waits; it takes one again after (a first contentful paint's, if its page has not painted yet)."""
    _draw_deferred(after_the_paint=False)
    held = _run.held
    _give_back()
    try:
        yield
    finally:
        if held:
            _take(_run.first_contentful_paint)


def _draw_deferred(after_the_paint: bool) -> None:
    deferred, _run.deferred = _run.deferred, ()
    if deferred and after_the_paint:
        painted()
    for draw in deferred:
        draw()


def _take(first_contentful_paint: bool) -> None:
    SCHEDULER.take(first_contentful_paint)
    _run.held = True


def _give_back() -> None:
    if _run.held:
        _run.held = False
        SCHEDULER.give_back()
