"""A typed nested path (``/a/nested/unknown/path``) opens the app instead of a blank page.

Streamlit answers every path it has no route for with its ``index.html``, whose scripts are linked relatively
(``./static/js/...``): under a path of one segment they resolve to the app's root, under a nested path to
``/a/nested/unknown/static/js/...``, which is ``index.html`` again, so the browser refuses it as a script and shows
a blank white page. Streamlit offers no option for it and no ``<base href>``; what it does offer is ``st.App``
(Streamlit >= 1.52, the public ASGI app that ``streamlit run app.py`` serves when the script assigns one) with
middleware of the app's own. :class:`NearestPageRedirect` is that middleware: a page load of a nested path that no
Streamlit route serves is redirected, its query kept, to the path's first segment, a page path Streamlit knows how to
answer: the page, if it names one (``/race/extra`` opens Race), else Streamlit's own "Page not found" over the main
page, with the sidebar's links. Everything else (the app's routes, its assets, fetches, websockets) passes untouched.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from starlette.datastructures import Headers
from starlette.middleware import Middleware
from starlette.responses import RedirectResponse
from starlette.routing import Match, Mount
from starlette.types import ASGIApp, Receive, Scope, Send
from streamlit import config


def nearest_page(path: str, base: str) -> str | None:
    """The page path a nested ``path`` falls back to (its first segment below the app's ``base`` path, '' or
    ``/base``), or None when it is no nested path of the app (the root, one segment, or outside the base)."""
    if not path.startswith(base + "/"):
        return None
    segments = [segment for segment in path[len(base) :].split("/") if segment]
    return f"{base}/{segments[0]}" if len(segments) > 1 else None


def is_page_load(headers: Mapping[str, str]) -> bool:
    """Whether a request loads a document into the browser's tab: its fetch metadata says so (a typed link), or,
    from a client that sends none, it asks for HTML. Scripts, fetches and frames are never redirected."""
    destination = headers.get("sec-fetch-dest")
    return destination == "document" if destination else "text/html" in headers.get("accept", "")


def served_by_a_route(scope: Scope, base: str) -> bool:
    """Whether a route of the app serves this path (its websocket, health, media, components, auth, the app's own
    static files) or it names a file of the mount of Streamlit's static files at the app's root (``base``), whose
    answer to any other path is its ``index.html``: either way the request passes untouched."""
    for route in getattr(scope.get("app"), "routes", None) or []:
        if route.matches(scope)[0] != Match.FULL:
            continue
        if isinstance(route, Mount) and route.path == base:
            directory = getattr(route.app, "directory", None)
            return directory is not None and os.path.isfile(
                os.path.join(directory, scope["path"][len(base) :].lstrip("/"))
            )
        return True
    return False


def base_path() -> str:
    """The app's base URL path as its routes are mounted: '' at ``/``, ``/base`` under ``server.baseUrlPath``."""
    base = str(config.get_option("server.baseUrlPath") or "").strip("/")
    return f"/{base}" if base else ""


class NearestPageRedirect:
    """ASGI middleware: a page load of a nested path no route serves becomes a 302 to :func:`nearest_page`."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        base, target = base_path(), None
        if scope["type"] == "http" and scope["method"] in {"GET", "HEAD"} and is_page_load(Headers(scope=scope)):
            target = nearest_page(scope["path"], base)
        if target is None or served_by_a_route(scope, base):
            await self.app(scope, receive, send)
            return
        query = scope.get("query_string", b"").decode("latin-1")
        await RedirectResponse(target + (f"?{query}" if query else ""), status_code=302)(scope, receive, send)


MIDDLEWARE = [Middleware(NearestPageRedirect)]  # st.App's middleware (the checkout's app.py)
