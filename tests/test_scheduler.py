"""Page runs take turns (specviz.serving.scheduler): at most the slots at a time, first contentful paints before rests,
each in the order they came, and nobody waits past the bound. Real threads, waits of at most a few seconds."""

from __future__ import annotations

import threading
import time

from specviz.serving.scheduler import Scheduler

SETTLE_S = 5.0  # the longest a test waits for a thread to reach its turn (a busy 2-core machine)


def waiter(turns: Scheduler, first_contentful_paint: bool, order: list[str], name: str) -> threading.Thread:
    """A thread that takes a turn, notes its name and gives the turn back; started, and left queued."""

    def run() -> None:
        turns.take(first_contentful_paint)
        order.append(name)
        turns.give_back()

    expected = sum(turns.waiting())
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    deadline = time.monotonic() + SETTLE_S
    while sum(turns.waiting()) < expected + 1 and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.01)
    return thread


def test_no_more_runs_than_slots_hold_a_turn_at_once():
    turns, order = Scheduler(slots=2), []
    turns.take(first_contentful_paint=True)
    turns.take(first_contentful_paint=True)  # both slots held
    third = waiter(turns, True, order, "third")
    assert turns.waiting() == (1, 0) and order == []  # the third waits (no GIL held: an event)
    turns.give_back()
    third.join(SETTLE_S)
    assert order == ["third"]


def test_a_waiting_first_paint_goes_before_a_rest_that_came_earlier():
    turns, order = Scheduler(slots=1), []
    turns.take(first_contentful_paint=True)
    threads = [
        waiter(turns, False, order, "rest 1"),
        waiter(turns, True, order, "paint 1"),
        waiter(turns, False, order, "rest 2"),
        waiter(turns, True, order, "paint 2"),
    ]
    assert turns.waiting() == (2, 2)
    turns.give_back()
    for thread in threads:
        thread.join(SETTLE_S)
    assert order == ["paint 1", "paint 2", "rest 1", "rest 2"]


def test_a_rest_does_not_take_a_free_slot_while_a_first_paint_waits():
    turns, order = Scheduler(slots=1), []
    turns.take(first_contentful_paint=False)
    paint = waiter(turns, True, order, "paint")
    turns.give_back()
    paint.join(SETTLE_S)
    assert order == ["paint"] and turns.waiting() == (0, 0)


def test_a_turn_waited_for_past_the_bound_is_taken_anyway_and_the_count_stays_whole():
    turns = Scheduler(slots=1)
    turns.take(first_contentful_paint=True)
    started = time.monotonic()
    turns.take(first_contentful_paint=True, timeout=0.2)  # the holder never gives back: taken over the bound
    assert 0.2 <= time.monotonic() - started < SETTLE_S and turns.waiting() == (0, 0)
    turns.give_back()
    turns.give_back()
    turns.take(first_contentful_paint=True, timeout=0.2)  # one slot again: free at once
    order: list[str] = []
    late = waiter(turns, True, order, "late")
    assert order == [] and turns.waiting() == (1, 0)  # and only one
    turns.give_back()
    late.join(SETTLE_S)
    assert order == ["late"]


def test_the_servers_page_runs_switch_the_gil_finely():
    """A process that imports the app's main script code (as the server does) hands the GIL over every
    SWITCH_INTERVAL_S, not CPython's 5 ms: the event loop starting 300 sessions' threads waits that much less."""
    import subprocess
    import sys

    from specviz.serving.scheduler import SWITCH_INTERVAL_S

    code = "import sys, specviz.ui.app; print(sys.getswitchinterval())"
    said = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert float(said) == SWITCH_INTERVAL_S < 0.005
