"""A headless client of the app's own server: a session over Streamlit's websocket protocol, without a browser.

A session opens ``ws://127.0.0.1:PORT/_stcore/stream`` (subprotocol "streamlit"), sends one ``BackMsg`` asking for a
script run with a link's query string and page, and reads ``ForwardMsg``s: the first server message, the first
contentful paint (the delta whose new element is the page's main view: the round view's player, an iframe) and the end
of the run (``script_finished``). Messages are parsed as protobuf and only the element's type is looked at, so one
process can hold hundreds of sessions: the lecture-hall benchmark (``benchmarks/load_client.py``) and the tests open
them here.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
from websockets.asyncio.client import connect
from websockets.typing import Subprotocol

from specviz.registry.rules import SAMPLING

FINISHED = ForwardMsg.ScriptFinishedStatus.Value("FINISHED_SUCCESSFULLY")
PAINT = {"": "iframe", "lesson_player": "iframe", "compare_rules": "plotly_chart"}  # each page's main view


@dataclass
class Session:
    """One session's times in seconds from its start (None: never happened) and its error, if any."""

    replica: int
    first_s: float | None = None
    paint_s: float | None = None
    end_s: float | None = None
    error: str | None = None


def rerun_request(query: str, page: str) -> bytes:
    message = BackMsg()
    message.rerun_script.query_string = query
    message.rerun_script.page_name = page
    return message.SerializeToString()


def paints(message: ForwardMsg, element: str) -> bool:
    return (
        message.WhichOneof("type") == "delta"
        and message.delta.WhichOneof("type") == "new_element"
        and message.delta.new_element.WhichOneof("type") == element
    )


async def run_session(port: int, replica: int, query: str, page: str, timeout_s: float) -> Session:
    session, start = Session(replica), time.monotonic()
    try:
        async with asyncio.timeout(timeout_s):
            async with connect(
                f"ws://127.0.0.1:{port}/_stcore/stream",
                subprotocols=[Subprotocol("streamlit")],
                ping_interval=None,
                max_size=None,
                compression=None,
            ) as ws:
                await ws.send(rerun_request(query, page))
                async for data in ws:
                    message, now = ForwardMsg.FromString(data), time.monotonic() - start
                    session.first_s = session.first_s if session.first_s is not None else now
                    if session.paint_s is None and paints(message, PAINT.get(page, "iframe")):
                        session.paint_s = now
                    if (
                        message.WhichOneof("type") == "delta"
                        and message.delta.new_element.WhichOneof("type") == "exception"
                    ):
                        session.error = "exception on the page"
                    if message.WhichOneof("type") == "script_finished" and message.script_finished == FINISHED:
                        session.end_s = now
                        break
    except Exception as exc:  # noqa: BLE001 - a benchmark counts failures instead of stopping
        session.error = f"{type(exc).__name__}: {str(exc)[:100]}"
    if session.error is None and session.paint_s is None:
        session.error = "no paint"
    return session


async def run_sessions(ports: list[int], links: list[tuple[str, str]], timeout_s: float) -> list[Session]:
    """Every (query string, page) link at once, session i on replica i mod len(ports)."""
    return await asyncio.gather(
        *(
            run_session(ports[i % len(ports)], i % len(ports), query, page, timeout_s)
            for i, (query, page) in enumerate(links)
        )
    )


def link(seed: int, tokens: int, rule: str = SAMPLING) -> str:
    return f"rule={rule}&seed={seed}&max_new_tokens={tokens}"
