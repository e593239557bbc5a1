"""Prepare a lecture as a teacher clicks it (#51): recording on, the lecture's pages opened by sidebar clicks and by
typed links (each a new session of the same browser), back to the lecture page, Prepare; then every recorded link,
opened by a fresh visitor, starts no computation (the server's work-pool log says so).

While it prepares (#66), the page counts what is stored (the traces the rehearsal decoded from the start), says a time
left that moves, stops the recording and says so; when it ends, the table's stored column is whole without a reload,
and a page opened afterwards (a typed link) adds nothing to the plan."""

from __future__ import annotations

import re
import sys
import time
from urllib.parse import urljoin

import pytest
from playwright.sync_api import expect, sync_playwright

from specviz.serving.processes import CHROMIUM_ARGS, Server, free_port

from .test_browser import ROOT

pytestmark = [pytest.mark.browser, pytest.mark.slow]

LECTURE = {  # the pages a lecture uses, by script, with their titles in the navigation
    "race": "Race",
    "metrics": "Metrics and theory",
    "gamma_sweep": "Gamma sweep",
    "losslessness": "Losslessness lab",
}
BY_SIDEBAR, BY_LINK = "max_new_tokens=4", "max_new_tokens=5"  # each way of opening a page records its own works
SETTLE_MS = 300_000  # a page run that computes on a busy 2-core machine: slow, never endless
# a server's first page run loads the pair and, where no quiet measurement is stored, measures the machine's defaults:
# seconds on an idle machine, 23 minutes seen on a 2-core machine running four other suites
FIRST_RUN_MS = 1_800_000
PREPARE_MS = 1_800_000  # the plan's computations (about 20 on the embedded pair at 4 and 5 tokens), one by one
AFTERWARDS = "max_new_tokens=6"  # a page opened after the preparation, with settings no recorded page had
PROGRESS = re.compile(r"Preparing: (\d+) of (\d+) stored · now .*?(?: · about (\d+ (?:s|min)) left)?$")
PREPARED = re.compile(r"Prepared: (\d+) of (\d+) computations are stored")


def settled(page, title: str) -> None:
    """Wait (bounded) until the page ``title`` names in the navigation has drawn its heading (which names it too) and
    its run has ended (the state streamlit writes on its app's root for tests, ``notRunning`` for 1 s)."""
    page.locator("h1", has_text=re.compile(title.split()[0], re.IGNORECASE)).first.wait_for(timeout=SETTLE_MS)
    deadline, quiet = time.monotonic() + SETTLE_MS / 1000, 0
    while quiet < 3:
        assert time.monotonic() < deadline, f"{title}'s page still runs after {SETTLE_MS / 1000:.0f} s"
        idle = page.locator('[data-testid="stApp"][data-test-script-state="notRunning"]').count() == 1
        quiet = quiet + 1 if idle else 0
        page.wait_for_timeout(500)


def recording_switch(page, timeout_ms: int = SETTLE_MS):
    """The lecture page's switch, once drawn (the page follows a preparation every second: it never settles)."""
    page.wait_for_url(re.compile(r"/lecture(\?|$)"), timeout=timeout_ms)
    switch = page.get_by_role("switch", name="Record the pages I open")
    switch.wait_for(timeout=timeout_ms)
    return switch


def stored_column(page, rows: int, whole: bool = False) -> list[str]:
    """The plan table's stored column, row by row, once its ``rows`` rows are drawn with their text (the grid's
    accessible table holds every row: the table is drawn at its full height); ``whole``: once every row is stored.
    Waited for, not read once: the accessible table follows the drawn grid a moment later."""
    return page.wait_for_function(
        """([rows, whole]) => {
            const drawn = [...document.querySelectorAll('[data-testid="stDataFrame"] table tbody tr')];
            const cells = drawn.map((row) => [...row.children].map((cell) => cell.textContent.trim()));
            const column = cells.map((row) => row[row.length - 1]);
            const ready = column.length === rows && cells.every((row) => row[0] !== '');
            return ready && (!whole || column.every((mark) => mark === '✓')) ? column : null;
        }""",
        arg=[rows, whole],
    ).json_value()


def progress_lines(page, timeout_ms: int) -> tuple[list[str], str]:
    """Every progress line the lecture page shows, each as it changes, and its final "Prepared" line (each wait is
    for the page's own text, bounded by what is left of ``timeout_ms``)."""
    seen: list[str] = []
    deadline = time.monotonic() + timeout_ms / 1000
    while True:
        left_ms = max(1, int((deadline - time.monotonic()) * 1000))
        text = page.wait_for_function(
            """([last, prepared]) => {
                const done = document.body.innerText.match(new RegExp(prepared));
                if (done) return done[0];
                const bar = document.querySelector('[data-testid="stProgress"]');
                const line = bar ? bar.innerText.trim() : '';
                return line && line !== last ? line : null;
            }""",
            arg=[seen[-1] if seen else "", PREPARED.pattern],
            timeout=left_ms,
        ).json_value()
        if PREPARED.fullmatch(text):
            return seen, text
        seen.append(text)


def test_a_lecture_recorded_by_clicks_and_links_is_prepared_and_its_links_then_compute_nothing(measured_machine):
    server = Server(free_port(), serve=[sys.executable, "-m", "streamlit", "run", "app.py"], cwd=ROOT)  # log: INFO
    try:
        server.wait_healthy()
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
            teacher = browser.new_context(viewport={"width": 1280, "height": 720})
            page = teacher.new_page()
            page.set_default_timeout(SETTLE_MS)
            page.goto(f"{server.url}/lecture?{BY_SIDEBAR}")
            recording_switch(page, FIRST_RUN_MS)
            page.get_by_text("Record the pages I open").click()  # its label: streamlit draws the switch over it
            page.wait_for_function("() => document.cookie.includes('specviz_recorder=')", timeout=SETTLE_MS)
            assert recording_switch(page).is_checked()

            nav = page.locator('[data-testid="stSidebarNav"]')
            for title in LECTURE.values():
                nav.get_by_role("link", name=title).click()
                settled(page, title)
            for script, title in LECTURE.items():
                page.goto(f"{server.url}/{script}?{BY_LINK}")  # a typed link: a new session
                settled(page, title)
            back = nav.get_by_role("link", name="Prepare a lecture")
            assert back.is_visible(), nav.inner_text()  # listed, not folded under "View N more"
            back.click()
            assert recording_switch(page).is_checked()  # the recording's state, which no page's widget kept
            listed = page.locator('[data-testid="stExpander"]').filter(has_text="The lecture's links")
            listed.get_by_text("The lecture's links").click()
            listed.locator('[data-testid="stCode"]').first.wait_for()
            links = listed.locator('[data-testid="stCode"]').all_inner_texts()
            for script in LECTURE:
                for opened in (BY_SIDEBAR, BY_LINK):
                    assert any(f"/{script}?" in link and opened in link for link in links), (script, opened, links)
            prepare = page.get_by_role("button", name=re.compile(r"Prepare the lecture \(\d+ computations\)"))
            count = int(re.search(r"\((\d+) computations", prepare.inner_text())[1])
            assert count >= 2 * len(LECTURE), prepare.inner_text()
            stored_before = stored_column(page, count).count("✓")
            assert stored_before > 0  # the pages decoded their traces while recording
            before = len(server.started())
            prepare.click()
            expect(recording_switch(page)).not_to_be_checked(timeout=SETTLE_MS)  # pressing Prepare stopped it
            lines, prepared = progress_lines(page, PREPARE_MS)
            assert prepared == f"Prepared: {count} of {count} computations are stored", prepared
            progress = [PROGRESS.fullmatch(line) for line in lines]
            assert lines and all(progress), lines
            counts = [int(match[1]) for match in progress]
            assert counts[0] >= stored_before and counts == sorted(counts), lines  # counted from the store
            assert len({match[3] for match in progress if match[3]}) >= 2, lines  # the time left moves
            stored_column(page, count, whole=True)  # current as it ends, with no reload
            page.get_by_text("Recording stopped: the lecture is prepared").wait_for()
            assert page.locator('[data-testid="stAlertContentError"]').count() == 0, page.inner_text("body")
            assert len(server.started()) > before  # the log shows what starts: preparing did start computations

            page.goto(f"{server.url}/metrics?{AFTERWARDS}")  # typed: recording is off, so it adds nothing
            settled(page, LECTURE["metrics"])
            nav.get_by_role("link", name="Prepare a lecture").click()
            expect(recording_switch(page)).not_to_be_checked(timeout=SETTLE_MS)
            page.get_by_role("button", name=f"Prepare the lecture ({count} computations)").wait_for()
            page.get_by_text(prepared).wait_for()

            for link in links:
                prepared = len(server.started())
                visitor = browser.new_context(viewport={"width": 1280, "height": 720})  # a student, fresh
                student = visitor.new_page()
                student.set_default_timeout(SETTLE_MS)
                student.goto(urljoin(server.url, link))
                settled(student, LECTURE[link.split("?")[0].rsplit("/", 1)[-1]])
                assert student.locator('[data-testid="stException"]').count() == 0, link
                student.wait_for_timeout(2_000)  # a computation the page run queued has started by now
                assert server.started()[prepared:] == [], link
                visitor.close()
            browser.close()
    finally:
        server.stop()
