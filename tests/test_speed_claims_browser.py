"""The race is the truth, as a teacher and a class meet it in a real browser (#70): a server that first measured
this machine under load states no figure from that measurement, the quiet race measured afterwards is the one figure
every speed page states, the class's race stays the teacher's in every tab of the teacher's browser, a quiz opened at
a later round reveals no earlier one, and pages opened fresh on the published pair compute nothing but their trace."""

from __future__ import annotations

import contextlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

from specviz.models.published import PUBLISHED, fetched
from tests.test_browser import (
    WORKING,
    answer_round,
    appears,
    chromium_page,
    logged_computations,
    running_server,
)

pytestmark = [pytest.mark.browser, pytest.mark.slow]

SPEEDUP = re.compile(r"(\d+\.\d+)× (faster|\(slower\))")
LOSING_WORDS = ("No draft pays", "does not pay", "slower than the target alone")
RACE_LINK = "max_new_tokens=12&seed=7"


@contextlib.contextmanager
def fresh_server(cache: Path):
    """`streamlit run app.py` on a cache of its own: the models' files of this machine's cache, no measurement of it
    (its ``machine`` folder left out), as a first start on this machine."""
    from specviz.cache import cache_root

    cache.mkdir()
    for entry in cache_root().iterdir():
        if entry.name != "machine":
            (cache / entry.name).symlink_to(entry)
    with running_server({"SPECVIZ_CACHE": str(cache)}) as server:
        yield server


@contextlib.contextmanager
def cores_held(count: int):
    """``count`` processes that each keep a core busy (another user's job on the machine) until the block ends."""
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        yield
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()


def page_text(page) -> str:
    return page.locator('[data-testid="stMain"]').inner_text()


def wait_for_the_machines_measurement(page, url: str) -> None:
    """Reload ``url`` until the sidebar no longer says the machine is being measured (the background measurement of
    the embedded pair's defaults has ended), as long as the app is at work."""
    page.goto(url)
    page.locator("h1").first.wait_for()
    while page.get_by_text("This machine is measured once").count():
        page.wait_for_timeout(5_000)
        page.goto(url)
        page.locator("h1").first.wait_for()


def settled(page) -> None:
    """Wait until the app has been idle (:data:`~tests.test_browser.WORKING` false) for three looks in a row."""
    idle = 0
    while idle < 3:
        idle = 0 if page.evaluate(WORKING) else idle + 1
        page.wait_for_timeout(1_000)


def stated_speedups(text: str) -> set[str]:
    """Every measured speedup a page states in words ("2.08× faster", "0.97× (slower)")."""
    return {match.group(0) for match in SPEEDUP.finditer(text)}


def test_a_start_under_load_states_nothing_and_the_quiet_race_is_every_pages_figure(embedded, tmp_path):
    """Two CPU-bound processes beside a fresh server while it first loads the pair and measures its passes, then
    stopped: the speed pages say the passes were measured busy and what the load was, and predict nothing from them;
    once the machine's measurement is done the teacher races, and Race, Metrics, Gamma sweep, Parallel verification
    and the Round view state that race's figure and no other speedup, and say nothing slower-than-the-target-alone
    against a race that won."""
    with fresh_server(tmp_path / "cache") as server, chromium_page(1366, 900) as page:
        with cores_held(2):
            page.goto(f"{server.url}/race?{RACE_LINK}")  # loading the pair measures its passes, under the load
            busy = page.get_by_text("Measured busy (other processes kept")
            appears(page, busy)
            assert "no figure here is predicted from it" in busy.first.inner_text()
        wait_for_the_machines_measurement(page, f"{server.url}/race?{RACE_LINK}")
        page.get_by_role("button", name=re.compile("Measure the race on this server")).click()
        page.get_by_role("button", name=re.compile("^Measure again")).wait_for()
        page.locator('[data-testid="stMetric"]').nth(1).wait_for()
        raced = SPEEDUP.search(page.locator('[data-testid="stMetric"]').nth(1).inner_text())
        assert raced is not None
        figure = raced.group(0)
        for path in ("race", "metrics", "gamma_sweep", "parallel_verification", ""):
            page.goto(f"{server.url}/{path}?{RACE_LINK}")
            if path == "race":  # the race itself: its lanes' figures
                page.locator('[data-testid="stMetric"]').nth(1).wait_for()
            else:
                headline = page.get_by_text("Speedup of this configuration")
                appears(page, headline)
                assert f"{figure}, measured" in headline.first.inner_text(), path
            text = page_text(page)
            assert stated_speedups(text) <= {figure}, (path, stated_speedups(text))  # one figure, the race's
            if raced.group(2) == "faster":
                assert not any(words in text for words in LOSING_WORDS), path


def test_the_class_race_stays_the_teachers_in_a_second_tab_and_a_students_pages_agree(embedded, tmp_path):
    """The teacher races from a plain link; a student opens the address bar's link in a browser of their own and
    measures again: every page of the student's session states the student's own race, and a new tab of the teacher's
    browser states the teacher's race, not the student's."""
    link = f"race?{RACE_LINK}"
    again = re.compile("^Measure again")
    with fresh_server(tmp_path / "cache") as server, chromium_page(1366, 900) as student:
        browser = student.context.browser
        assert browser is not None
        teachers_browser = browser.new_context(viewport={"width": 1366, "height": 900})  # cookies shared by its tabs
        teachers_browser.set_default_timeout(600_000)
        teacher = teachers_browser.new_page()
        teacher.goto(f"{server.url}/{link}")
        teacher.get_by_role("button", name=re.compile("Measure the race on this server")).click()
        teacher.get_by_role("button", name=again).wait_for()
        teachers = SPEEDUP.search(teacher.locator('[data-testid="stMetric"]').nth(1).inner_text())
        assert teachers is not None
        student.goto(teacher.url)  # a browser of its own: the address bar's link
        student.get_by_role("button", name=again).click()
        student.get_by_text("Your own measurement, shown to you alone").wait_for()
        students = SPEEDUP.search(student.locator('[data-testid="stMetric"]').nth(1).inner_text())
        assert students is not None
        student.get_by_role("link", name="Metrics and theory").click()
        headline = student.get_by_text("Speedup of this configuration")
        appears(student, headline)
        assert f"{students.group(0)}, measured" in headline.first.inner_text()  # the session's one race
        tab = teachers_browser.new_page()  # a second tab of the teacher's browser
        tab.goto(f"{server.url}/{link}")
        tab.get_by_role("button", name=again).wait_for()
        tab.locator('[data-testid="stMetric"]').nth(1).wait_for()
        assert SPEEDUP.search(tab.locator('[data-testid="stMetric"]').nth(1).inner_text()).group(0) == (
            teachers.group(0)
        )
        assert tab.get_by_text("Your own measurement").count() == 0


def test_a_quiz_opened_at_a_later_round_reveals_no_earlier_one(embedded, tmp_path):
    """A student's quiz link at round 3: the rounds before it were shown in its context, so they are not asked, and
    First and Prev show their verdicts as not asked, never an unanswered question; the score counts round 3 on."""
    with fresh_server(tmp_path / "cache") as server, chromium_page(1366, 900) as page:
        page.goto(f"{server.url}/lesson_player?max_new_tokens=16&seed=3&student=1&view=quiz&round=3")
        frame = page.frame_locator("iframe").first
        frame.locator("#view-quiz[aria-pressed='true']").wait_for()
        assert frame.locator("#title").inner_text().startswith("Round 3 of")
        asked = answer_round(page)
        frame.locator("#first").click()
        assert frame.locator("#title").inner_text().startswith("Round 1 of")
        assert frame.locator("button[data-guess]").count() == 0  # nothing asked before the quiz's round
        assert "answer the quiz to reveal" not in frame.locator("#rows").inner_text()  # shown, not a question
        cards, title = frame.locator("#cards").inner_text(), frame.locator("#title").inner_text()
        assert "Before the quiz's first round, not asked" in cards or "nothing to ask" in title
        assert f"/ {asked}" in frame.locator("#score").inner_text()  # round 3's questions, no earlier one


@pytest.mark.skipif(not all(fetched(model) for model in PUBLISHED.values()), reason="the published pair is fetched")
def test_every_page_opened_fresh_on_the_published_pair_computes_nothing_but_its_trace(embedded, tmp_path):
    """Each page opened by a typed link on the Qwen2.5-Coder pair of a fresh server: the server's log shows no
    computation but the link's one trace (Metrics included: its prediction is arithmetic on stored figures)."""
    from specviz.ui.navigation import PAGES

    pair = "target=qwen-coder-1.5b&draft=qwen-coder-0.5b&max_new_tokens=8"
    with fresh_server(tmp_path / "cache") as server, chromium_page(1366, 900) as page:
        # a first start measures the embedded pair in the background: the app's defaults, which a typed link of another
        # pair follows too, move when it ends (links written meanwhile name them); the pages are opened after it
        page.goto(f"{server.url}/race?max_new_tokens=2")
        wait_for_the_machines_measurement(page, f"{server.url}/race?max_new_tokens=2")
        for entry in PAGES:
            path = "" if entry == PAGES[0] else entry.script
            page.goto(f"{server.url}/{path}?{pair}")
            page.locator("h1").first.wait_for()
            settled(page)  # the pair loaded, the page drawn to its end: whatever it computes on opening has run
            assert page.locator('[data-testid="stException"]').count() == 0, entry.script
        logged = logged_computations(server)
    assert {label for label, _ in logged} == {"Decoding"}, logged
    assert len({digest for _, digest in logged}) == 1, logged  # the link's one trace, once
