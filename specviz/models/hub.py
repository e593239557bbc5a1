"""The model hub as this machine sees it: whether it answers now, whether a hub id is cached here, and what to do
offline instead (no model code)."""

from __future__ import annotations

import functools
import socket
from urllib.parse import urlparse

import huggingface_hub

from specviz.models.published import FETCH_COMMAND, PUBLISHED, fetched

HUB_PROBE_SECONDS = 3.0


def offline_next_step() -> str:
    """What to do instead of a model the hub would have given: the published pair's fetch is named only where it
    is not fetched yet."""
    fetch = (
        ""
        if all(fetched(model) for model in PUBLISHED.values())
        else f"fetch the published pair once with `{FETCH_COMMAND}`, "
    )
    return (
        f"Next step: pick a pair marked ✓ in the sidebar (the embedded pair runs anywhere), {fetch}or give a "
        "directory made by `save_pretrained`."
    )


def hub_reachable() -> bool:
    """Whether the model hub accepts a connection now (``HUB_PROBE_SECONDS`` at most). Offline, hub ids
    are then looked up in the local cache only, so an unknown id fails at once instead of waiting out
    the hub client's retries, and a cached model still loads."""
    host = urlparse(huggingface_hub.constants.ENDPOINT).hostname
    try:
        socket.create_connection((host, 443), timeout=HUB_PROBE_SECONDS).close()
    except OSError:
        return False
    return True


@functools.cache
def hub_answers() -> bool:
    """:func:`hub_reachable`, asked once per process (the sidebar marks the hub pairs with it on every run)."""
    return hub_reachable()


def in_local_hub_cache(hub_id: str) -> bool:
    """Whether a hub id's config is in this machine's model-hub cache (it then loads offline)."""
    try:
        return isinstance(huggingface_hub.try_to_load_from_cache(hub_id, "config.json"), str)
    except ValueError:  # not a hub id at all
        return False
