"""The load client (benchmarks/load_client.py) against a real app server started here: it sees a session's
first paint, and two sessions on one link make the server compute the trace once."""

from __future__ import annotations

import asyncio
import time

import pytest

from benchmarks.load_client import link, run_sessions
from specviz.serving.processes import Server, free_port


@pytest.fixture(scope="module")
def server(embedded):  # the embedded fixture makes sure the de-quantised cache exists
    app = Server(free_port())
    app.wait_healthy()
    yield app
    app.stop()


def test_one_session_gets_a_first_paint(server):
    (session,) = asyncio.run(run_sessions([server.port], [(link(11, 4), "")], timeout_s=600))
    assert session.error is None
    assert 0 <= session.first_s <= session.paint_s <= session.end_s


def logged_since(server: Server, before: int) -> int:
    """Computations the server logged since ``before`` (its log is read on another thread: let it catch up)."""
    for _ in range(6000):
        if len(server.computations()) > before:
            break
        time.sleep(0.1)
    return len(server.computations()) - before


def test_two_sessions_on_one_link_compute_once(server):
    before = len(server.computations())
    sessions = asyncio.run(run_sessions([server.port], [(link(12, 4), "")] * 2, timeout_s=600))
    assert all(s.error is None and s.paint_s is not None for s in sessions)
    assert logged_since(server, before) == 1  # one trace for both
    again = asyncio.run(run_sessions([server.port], [(link(12, 4), "")], timeout_s=600))
    assert again[0].paint_s is not None and logged_since(server, before) == 1  # stored: not computed again
