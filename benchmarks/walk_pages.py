"""Every page of both pairs opened as a fresh visitor: how long until the page is usable, and whether opening it
started a computation.

Usage: ``.venv/bin/python -m benchmarks.walk_pages [--pairs embedded,qwen] [--tokens 32] [--timeout 300]``

One ``streamlit run app.py`` in the checkout (its log at INFO: the work pool logs every shared computation it starts).
For each pair, the pair is first loaded and its round-view trace computed once by a warm-up visitor (what a teacher
opening the link before class does); then each page of the navigation is opened in a new browser context (a fresh
visitor: no session, no cookies) at 1280x720. Per page it prints the seconds from navigation until the page is
usable (its title drawn and Streamlit's script run over: no status widget for 1.5 s), the computations the server
started while it opened (their labels: a page that starts work by being opened shows here; the round's own trace,
computed once per link, is expected on the round view and the lesson player), and any error box or traceback on it.
A benchmark, not a test: nothing is asserted, the figures are printed from one run.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from urllib.parse import urlencode

from playwright.sync_api import Page, sync_playwright

from specviz.serving.processes import CHROMIUM_ARGS, Server, free_port
from specviz.ui.navigation import PAGES
from specviz.ui.presets import PAIR_PRESETS, QWEN_CODER_PAIR

ROOT = Path(__file__).resolve().parent.parent
PAIRS = {"embedded": {}, "qwen": dict(zip(("target", "draft"), PAIR_PRESETS[QWEN_CODER_PAIR] or ()))}
ERRORS = '[data-testid="stException"], [data-testid="stAlertContentError"]'
QUIET_CHECKS, CHECK_MS = 3, 500  # usable: a title drawn and streamlit's status widget (shown while a run) gone 1.5 s


def page_url(base: str, script: str, query: dict[str, str]) -> str:
    path = "" if script == PAGES[0].script else script  # the default page's path is the app's root
    return f"{base}/{path}?{urlencode(query)}"


def wait_usable(page: Page, timeout_s: float) -> float | None:
    """Seconds until the page is usable: its title drawn and no script run under way (streamlit's status widget
    absent for :data:`QUIET_CHECKS` checks in a row, counted from the first of them); None when not within
    ``timeout_s``."""
    start, quiet_since, quiet = time.monotonic(), 0.0, 0
    while quiet < QUIET_CHECKS:
        if time.monotonic() - start > timeout_s:
            return None
        running = page.locator('[data-testid="stStatusWidget"]').count() or not page.locator("h1").count()
        if not running and not quiet:
            quiet_since = time.monotonic() - start
        quiet = 0 if running else quiet + 1
        page.wait_for_timeout(CHECK_MS)
    return quiet_since


def walk(base: str, server: Server, browser, pair: str, query: dict[str, str], timeout_s: float) -> None:
    print(f"\n{pair}: {urlencode(query) or 'the default link'}")
    warm = browser.new_context(viewport={"width": 1280, "height": 720})
    start = time.monotonic()
    usable = wait_usable(opened(warm, page_url(base, PAGES[0].script, query)), timeout_s * 4)
    warm.close()
    print(f"  warm-up (pair loaded, the round's trace computed): {fmt(usable)} ({time.monotonic() - start:.1f} s)")
    print(f"  {'page':<24} {'usable, s':>10}  computations started on open")
    for entry in PAGES:
        since = len(server.lines)
        context = browser.new_context(viewport={"width": 1280, "height": 720})
        page = opened(context, page_url(base, entry.script, query))
        usable = wait_usable(page, timeout_s)
        errors = page.locator(ERRORS).count()
        context.close()
        time.sleep(0.5)  # the log's last lines
        labels = server.started(since)
        started = ", ".join(labels) if labels else "none"
        print(f"  {entry.script:<24} {fmt(usable):>10}  {started}{f'  ({errors} error box(es))' if errors else ''}")


def opened(context, url: str) -> Page:
    page = context.new_page()
    page.goto(url)
    return page


def fmt(seconds: float | None) -> str:
    return "not usable" if seconds is None else f"{seconds:.1f}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", default="embedded,qwen", help="comma-separated: embedded, qwen")
    parser.add_argument("--tokens", type=int, default=32, help="max_new_tokens of every link")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds a page may take to become usable")
    args = parser.parse_args(argv)
    server = Server(free_port(), serve=[sys.executable, "-m", "streamlit", "run", "app.py"], cwd=ROOT)
    try:
        server.wait_healthy()
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
            for pair in args.pairs.split(","):
                walk(
                    server.url, server, browser, pair, {**PAIRS[pair], "max_new_tokens": str(args.tokens)}, args.timeout
                )
            browser.close()
    finally:
        server.stop()


if __name__ == "__main__":
    main()
