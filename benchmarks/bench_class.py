"""A class on one server: N real Chromium sessions against a real ``specviz app``.

Usage: ``.venv/bin/python -m benchmarks.bench_class [--sessions 30] [--tokens 32]``

Phases, after one warm-up session has loaded the models (on a seed nobody uses later):
1. **one link**: every session opens the same teacher's link at once;
2. **same link again**: one session, then everyone, reopen it (the trace is stored: what remains
   is the server's page runs and the browsers' rendering);
3. **different seeds**: every session opens its own seed at once (distinct work, queued fairly).
With ``--floor`` it first measures the browsers' own share: the same N sessions opening a bare Streamlit
page (one line of text, no models, no player) on this machine, the least any Streamlit page costs here.
For each phase it prints time to first contentful paint (the round's rows drawn) p50 / p95 / max, the server's
CPU seconds, errors (exceptions or error boxes on a page, or no paint at all), and how many times a
trace was computed (the server logs each shared computation; ``SPECVIZ_LOG_LEVEL=INFO``).
A benchmark, not a test: nothing is asserted, the figures are printed from one run.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from pathlib import Path

from playwright.async_api import async_playwright

from specviz.serving import processes
from specviz.serving.processes import Server, free_port

CHROMIUM_ARGS = [*processes.CHROMIUM_ARGS, "--disable-dev-shm-usage"]  # as the class benchmark always ran it
FAILED = '[data-testid="stException"], [data-testid="stAlertContentError"]'
# The student sees the round: the round view's player (an iframe of the same origin) has drawn its rows,
# or an error shows.
PAINTED_OR_FAILED = (
    f"""() => document.querySelector('{FAILED}') !== null ||
    [...document.querySelectorAll('iframe')].some(f => f.contentDocument && """
    "f.contentDocument.querySelector('.sv-rows'))"
)
BARE_PAINTED = """() => document.querySelector('[data-testid="stMarkdownContainer"]') !== null"""
BARE_APP = 'import streamlit as st\nst.write("A bare page: no models, no player.")\n'


async def open_session(browser, url: str, timeout_s: float, painted: str) -> tuple[float | None, str | None]:
    """Seconds from navigation until ``painted`` holds (the first round drawn), and an error (None when all went
    well)."""
    context = await browser.new_context(viewport={"width": 1280, "height": 900})
    page = await context.new_page()
    start = time.monotonic()
    try:
        await page.goto(url, timeout=timeout_s * 1000)
        await page.wait_for_function(painted, timeout=timeout_s * 1000, polling=100)
        elapsed = time.monotonic() - start
        failed = await page.locator(FAILED).count()
        return (None, "error shown on the page") if failed else (elapsed, None)
    except Exception as exc:  # noqa: BLE001 - a benchmark counts failures instead of stopping
        return None, f"{type(exc).__name__}: {str(exc)[:120]}"
    finally:
        await context.close()


async def phase(browser, server: Server, urls: list[str], timeout_s: float, painted: str = PAINTED_OR_FAILED) -> dict:
    cpu, logged = server.cpu_seconds(), len(server.computations())
    start = time.monotonic()
    results = await asyncio.gather(*(open_session(browser, url, timeout_s, painted) for url in urls))
    wall = time.monotonic() - start
    await asyncio.sleep(1.0)  # let the last log lines arrive
    times = sorted(t for t, _ in results if t is not None)
    computations = server.computations()[logged:]
    return dict(
        sessions=len(urls),
        painted=len(times),
        errors=[e for _, e in results if e],
        wall_s=wall,
        p50=statistics.median(times) if times else None,
        p95=times[min(len(times) - 1, int(round(0.95 * len(times))) - 1)] if times else None,
        max=times[-1] if times else None,
        cpu_s=server.cpu_seconds() - cpu,
        traces_computed=len(computations),
        keys=len({key for key, _, _ in computations}),
        trace_s=statistics.mean(s for _, s, _ in computations) if computations else None,
    )


def report(name: str, r: dict) -> None:
    def fmt(x):
        return "-" if x is None else f"{x:.1f}"

    print(
        f"{name:<16} sessions {r['sessions']:>3} · painted {r['painted']:>3} · errors {len(r['errors'])} · "
        f"first contentful paint p50 {fmt(r['p50'])} s, p95 {fmt(r['p95'])} s, max {fmt(r['max'])} s · "
        f"server CPU {r['cpu_s']:.1f} s · traces computed {r['traces_computed']} "
        f"({r['keys']} distinct, {fmt(r['trace_s'])} s each) · wall {r['wall_s']:.1f} s"
    )
    for error in sorted(set(r["errors"]))[:5]:
        print(f"{'':<16} error: {error}")


def renice_browsers(niceness: int) -> None:
    """Set every Chromium process to ``niceness`` (Chromium re-prioritises its own processes, so once is not enough)."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "comm").read_text().strip().startswith("chromium"):
                    os.setpriority(os.PRIO_PROCESS, int(entry.name), niceness)
            except OSError:
                continue  # the process ended, or it is not ours


async def keep_browsers_nice(niceness: int) -> None:
    while True:
        renice_browsers(niceness)
        await asyncio.sleep(0.5)


async def bare_page_floor(browser, sessions: int, timeout_s: float, folder: Path) -> None:
    """N sessions on a one-line Streamlit page: what the browsers and Streamlit's front end cost here alone."""
    app = folder / "bare_page.py"
    app.write_text(BARE_APP, encoding="utf-8")
    server = Server(free_port(), app)
    try:
        server.wait_healthy()
        report("bare page, one", await phase(browser, server, [server.url], timeout_s, BARE_PAINTED))
        report("bare page", await phase(browser, server, [server.url] * sessions, timeout_s, BARE_PAINTED))
    finally:
        server.stop()


async def main(sessions: int, tokens: int, timeout_s: float, browser_nice: int, seeds: bool, floor: bool) -> None:
    server = Server(free_port())
    try:
        server.wait_healthy()
        # The students' browsers stand in for their own laptops: kept at this niceness, 30 renderers do not
        # take the server's CPU on a 2-core box (they still share it with the server, which the report says).
        nicer = asyncio.get_running_loop().create_task(keep_browsers_nice(browser_nice)) if browser_nice else None
        link = f"{server.url}/?max_new_tokens={tokens}"
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
            if floor:
                with tempfile.TemporaryDirectory() as folder:
                    await bare_page_floor(browser, sessions, timeout_s, Path(folder))
            warm = await phase(browser, server, [f"{link}&seed=999999"], timeout_s)
            report("warm-up (load)", warm)
            one = await phase(browser, server, [f"{link}&seed=1"] * sessions, timeout_s)
            report("one link", one)
            alone = await phase(browser, server, [f"{link}&seed=1"], timeout_s)
            report("one, stored", alone)  # one page on the stored trace: the floor of first contentful paint
            again = await phase(browser, server, [f"{link}&seed=1"] * sessions, timeout_s)
            report("same link again", again)  # the trace is stored: page and browser costs alone
            if seeds:
                many = await phase(browser, server, [f"{link}&seed={100 + i}" for i in range(sessions)], timeout_s)
                report("different seeds", many)
            await browser.close()
        if nicer:
            nicer.cancel()
        print(
            f"machine: {os.cpu_count()} CPU cores shared by the server and the browsers (browsers at nice "
            f"{browser_nice}); {tokens} new tokens per trace; embedded default pair"
        )
    finally:
        server.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=30)
    parser.add_argument("--tokens", type=int, default=32, help="max new tokens of every trace")
    parser.add_argument(
        "--timeout", type=float, default=1800, help="seconds a session may wait before it counts as failed"
    )
    parser.add_argument(
        "--browser-nice",
        type=int,
        default=19,
        help="niceness of the browsers (0: they compete with the server for the CPU as equals)",
    )
    parser.add_argument("--no-seeds", action="store_true", help="skip the different-seeds phase (the longest)")
    parser.add_argument(
        "--floor", action="store_true", help="first measure N sessions on a bare one-line Streamlit page"
    )
    args = parser.parse_args()
    asyncio.run(main(args.sessions, args.tokens, args.timeout, args.browser_nice, not args.no_seeds, args.floor))
