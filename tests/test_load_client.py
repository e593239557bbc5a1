"""The headless session client (specviz/ui/session_client.py) against a real app server started here: it sees a
session's first contentful paint, and two sessions on one link make the server compute the trace once."""

from __future__ import annotations

import asyncio
import time

import pytest

from specviz.serving.processes import Server, free_port
from specviz.ui.session_client import link, run_sessions

pytestmark = [pytest.mark.slow]


@pytest.fixture(scope="module")
def server(measured_machine):  # the de-quantised cache and this machine's defaults exist
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


async def element_order(port: int, query: str) -> list[tuple[str, str]]:
    """(where, element type) of each new element one session's page run sends, in order: where is "sidebar" or
    "main" (the root container a delta path starts from)."""
    from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
    from websockets.asyncio.client import connect
    from websockets.typing import Subprotocol

    from specviz.ui.session_client import rerun_request

    seen = []
    url = f"ws://127.0.0.1:{port}/_stcore/stream"
    async with connect(url, subprotocols=[Subprotocol("streamlit")], max_size=None) as ws:
        await ws.send(rerun_request(query, ""))
        async for data in ws:
            message = ForwardMsg.FromString(data)
            if message.WhichOneof("type") == "script_finished":
                return seen
            if message.WhichOneof("type") == "delta" and message.delta.WhichOneof("type") == "new_element":
                where = {0: "main", 1: "sidebar"}.get(message.metadata.delta_path[0], "other")
                seen.append((where, message.delta.new_element.WhichOneof("type")))
    return seen


def test_the_player_is_sent_before_the_sidebars_widgets(server):
    """A class's first contentful paint is the lesson player: the sidebar's widgets (chosen before the page, drawn
    after its first contentful paint, specviz.ui.scheduling) follow it, all of them."""
    query = link(13, 4)
    asyncio.run(run_sessions([server.port], [(query, "")], timeout_s=600))  # the trace, computed once
    seen = asyncio.run(asyncio.wait_for(element_order(server.port, query), timeout=600))
    player = seen.index(("main", "iframe"))
    sidebar = [i for i, (where, kind) in enumerate(seen) if where == "sidebar"]
    kinds = {kind for where, kind in seen if where == "sidebar"}
    assert sidebar and min(sidebar) > player, seen
    assert {"selectbox", "radio", "slider", "text_area"} <= kinds, seen
