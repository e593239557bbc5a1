"""A real browser on the real app: `streamlit run app.py` in the checkout on the embedded default, driven by
chromium (the wheel's `specviz app`: tests/test_package.py)."""

from __future__ import annotations

import contextlib
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from playwright.sync_api import Page, sync_playwright
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from specviz.serving.processes import CHROMIUM_ARGS, Server, free_port

from .test_llamacpp_passes import stored_capture  # noqa: F401  (this CPU's measurement, a real file, put back after)

pytestmark = [pytest.mark.browser, pytest.mark.slow]

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "artifacts"
PATIENCE_MS = 600_000  # a page's every wait: bounded work that a busy 2-core machine makes slow, never wrong
SETTLE_MS = 60_000  # the layout following its content (fonts, columns, a frame's height) before it is measured


@contextlib.contextmanager
def running_server(env: dict[str, str] | None = None):
    """A plain `streamlit run app.py` in the checkout (Streamlit reads .streamlit/config.toml there) on a free port,
    on the CPU, logging every shared computation (``env``: variables added to its environment); yields it once it
    answers."""
    server = Server(free_port(), serve=[sys.executable, "-m", "streamlit", "run", "app.py"], cwd=ROOT, env=env)
    try:
        server.wait_healthy()
        yield server
    finally:
        server.stop()


@contextlib.contextmanager
def running_app():
    """:func:`running_server`'s URL."""
    with running_server() as server:
        yield server.url


@pytest.fixture(scope="module")
def app_url(measured_machine):  # the de-quantised cache and this machine's defaults exist, as after a first start
    with running_app() as url:
        yield url


def test_a_page_link_opened_first_on_a_fresh_server_keeps_the_prompt_at_the_next_click(measured_machine):
    """A teacher starts the server and shares a link to a page: streamlit runs that first request without
    app.py (its pages/ folder mode). The sidebar drawn then used to lose the prompt at the next click."""
    with running_app() as url, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.set_default_timeout(600_000)
        page.goto(f"{url}/gamma_sweep?max_new_tokens=4")
        run = page.get_by_role("button", name="Run the sweep")
        run.wait_for()
        prompt = page.get_by_label("Prompt").input_value()
        assert prompt.strip()
        run.click()
        outcome = page.get_by_text("fastest γ in this sweep").or_(page.get_by_text("The prompt is empty"))
        outcome.or_(page.locator('[data-testid="stException"]')).first.wait_for()  # whichever comes: fail fast
        assert "prompt is empty" not in page.inner_text("body")
        assert page.get_by_label("Prompt").input_value() == prompt
        browser.close()


def test_streamlit_run_app_py_serves_every_page_in_pages(app_url):
    """Every page of the navigation opens at its own path from the checkout's top-level pages/: its title drawn,
    no error, no "page not found" (streamlit's answer to a path it has no page for)."""
    from specviz.ui.navigation import PAGES

    with chromium_page(1400, 1000) as page:
        for entry in PAGES:
            path = "" if entry == PAGES[0] else entry.script  # the default page's path is the app's root
            page.goto(f"{app_url}/{path}?max_new_tokens=4")
            page.locator("h1").first.wait_for()
            assert page.locator('[data-testid="stException"]').count() == 0, entry.script
            assert "not found" not in page.inner_text("body").lower(), entry.script
            assert page.url.split("?")[0] == f"{app_url}/{path}", entry.script


def test_the_sidebars_settings_stay_the_apps_across_page_switches(app_url):
    """The sidebar's widgets are drawn after the page's first contentful paint, and before a page waits for its trace
    (specviz.ui.scheduling): they stay the app's, not that page's (streamlit drops a page's own widgets when another
    page opens). A link's settings survive opening other pages by the sidebar, shown and in the address."""
    with chromium_page(1280, 720) as page:
        page.goto(f"{app_url}/?max_new_tokens=7&seed=3")  # a trace nobody computed: the page waits for it
        page.frame_locator("iframe").first.locator("#title").wait_for()
        pages = {"Race": "The race", "Metrics and theory": "Metrics", "Round view": "Speculative decoding, round"}
        for name, heading in pages.items():
            page.locator('[data-testid="stSidebarNav"]').get_by_role("link", name=name).click()
            page.get_by_role("heading", name=heading).wait_for()
            tokens = page.get_by_role("slider", name="Max new tokens")
            tokens.wait_for()
            page.wait_for_function("() => location.search.includes('seed=3')")
            assert tokens.input_value() == "7", (name, page.url)
            assert "max_new_tokens=7" in page.url and "seed=3" in page.url, (name, page.url)


def test_an_unknown_view_in_a_typed_link_is_said_and_the_page_opens(app_url):
    """``view=hack`` (no view of the player) is answered like every other bad value: a message naming the views, and
    the page opens on its own view."""
    with chromium_page(1280, 720) as page:
        page.goto(f"{app_url}/?max_new_tokens=4&view=hack")
        page.get_by_text("view='hack' ignored (must be one of step, present, quiz, race)").wait_for()
        page.get_by_role("heading", name="Speculative decoding, round by round").wait_for()


def test_a_typed_nested_path_opens_the_app_not_a_blank_page(app_url):
    """A nested path no page has opens its nearest page path with the link's settings: Streamlit's "Page not found"
    over the main page with every page's link, or the page it begins with; never a blank page. Streamlit's own
    routes and assets still answer a page load themselves (specviz.ui.nested_paths)."""
    with chromium_page(1280, 720) as page:
        page.goto(f"{app_url}/a/nested/unknown/path?max_new_tokens=4")
        page.get_by_text("Page not found").wait_for()
        page.get_by_role("heading", name="Speculative decoding, round by round").wait_for()
        assert page.get_by_role("link", name="Race").is_visible()
        assert "max_new_tokens=4" in page.url
        page.goto(f"{app_url}/race/extra?max_new_tokens=4")
        page.get_by_role("heading", name="The race").wait_for()
        assert page.url.startswith(f"{app_url}/race?max_new_tokens=4")
        for own in ("_stcore/health", page.evaluate("document.querySelector('script[src]').getAttribute('src')")):
            loaded = page.goto(f"{app_url}/{own.removeprefix('./')}")
            assert loaded is not None and loaded.status == 200 and loaded.url == f"{app_url}/{own.removeprefix('./')}"


FRAME_FIT = """() => { const frame = document.querySelector('iframe'), doc = frame.contentDocument;
  return [frame.clientHeight, doc.documentElement.scrollHeight,
          doc.querySelector('main').getBoundingClientRect().bottom]; }"""


def assert_frame_fits(page) -> None:
    """The player's frame shows the whole player: no scrollbar inside it, no blank band of more than 40 px below."""
    with contextlib.suppress(PlaywrightTimeout):  # the frame follows its content within moments: then it is measured
        page.wait_for_function(
            f"() => {{ const [h, content, bottom] = ({FRAME_FIT})(); return content <= h + 1 && h - bottom <= 40; }}",
            timeout=SETTLE_MS,
        )
    height, content, bottom = page.evaluate(FRAME_FIT)
    assert content <= height + 1 and height - bottom <= 40, (height, content, bottom)


def test_round_view_in_chromium(app_url):
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1500, "height": 1700})
        page.set_default_timeout(600_000)  # bounded work; a busy 2-core machine may be slow, never wrong
        page.goto(f"{app_url}/?max_new_tokens=16")
        player = page.frame_locator("iframe").first  # the round view steps in the browser: the lesson player
        player.locator("#seed .sv-rows").wait_for(timeout=600_000)
        rows = player.locator("#seed .sv-label").all_inner_texts()
        assert rows[:6] == ["Prompt", "Decoder input", "Draft", "Verify", "Output", "Next input"]
        marks = "".join(player.locator("#seed .sv-mark").all_inner_texts())
        assert "✓" in marks or "✗" in marks
        assert player.locator(".card svg.pq rect.p-bar").count() >= 2  # p-vs-q bars, drawn by the page
        assert_frame_fits(page)
        assert player.locator("#title").inner_text().startswith("Round 1 of")
        player.get_by_role("button", name="Next ▶").click()
        assert player.locator("#title").inner_text().startswith("Round 2 of")  # no server round trip
        # the link reopens this round
        page.wait_for_function("() => location.search.includes('round=2')", timeout=600_000)
        player.locator("body").press("ArrowRight")
        assert player.locator("#title").inner_text().startswith("Round 3 of")
        page.wait_for_function("() => location.search.includes('round=3')", timeout=600_000)
        assert_frame_fits(page)  # a round of another height: the frame follows it
        page.reload()  # what a copied link does: it opens on the round the page showed
        player = page.frame_locator("iframe").first
        player.locator("#seed .sv-rows").wait_for(timeout=600_000)
        assert player.locator("#title").inner_text().startswith("Round 3 of")
        page.screenshot(path=str(ARTIFACTS / "round_view.png"), full_page=True)

        # a sidebar edit re-runs the trace and lands in the URL (what a teacher then shares)
        page.locator('[data-testid="stSidebar"]').get_by_text("spec. sampling").click()
        page.wait_for_function("() => location.search.includes('rule=sample')", timeout=600_000)
        page.frame_locator("iframe").first.locator(".test", has_text="vs u = ").first.wait_for(timeout=600_000)
        assert page.locator('[data-testid="stSidebar"] [data-testid="stSlider"]').count() >= 5

        # the lesson page and the recursive page's taller tree rounds: their frames fit the player too
        for path in ("lesson_player", "recursive"):
            page.goto(f"{app_url}/{path}?max_new_tokens=8")
            if path == "recursive":  # the sidebar's drafter is a chain: the tree's rounds are a press away
                page.get_by_role("button", name=re.compile("Decode with the tree")).click()
            page.frame_locator("iframe").first.locator("#cards .card").first.wait_for(timeout=600_000)
            assert_frame_fits(page)
        page.goto(f"{app_url}/?max_new_tokens=16&rule=sample")
        page.frame_locator("iframe").first.locator("#cards .card").first.wait_for(timeout=600_000)

        # another page keeps the sidebar's configuration
        page.get_by_role("link", name="Metrics and theory").click()
        page.wait_for_selector("text=tokens/round, Eq. 1", timeout=600_000)
        assert "rule=sample" in page.url
        time.sleep(1.5)
        page.screenshot(path=str(ARTIFACTS / "metrics.png"), full_page=True)
        browser.close()
    assert (ARTIFACTS / "round_view.png").stat().st_size > 10_000


def test_the_roofline_panel_in_chromium(app_url):
    """The Parallel verification page draws this machine's measured roofline: the target's and the draft's passes
    over 1..9 tokens beside the memory and compute bounds, and the sentence the profile writes (the draft's pass
    measured by the teacher's press where nothing measured it yet: opening a page measures nothing)."""
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1440, "height": 1000})
        page.set_default_timeout(600_000)
        page.goto(f"{app_url}/parallel_verification?max_new_tokens=8")
        appears(page, page.get_by_text("one pass over k + 1 new tokens"))
        measure = page.get_by_role("button", name=re.compile("Measure the drafter's passes"))
        if measure.count():  # nothing measured the draft's own pass on this server yet: opening measured nothing
            measure.click()
            appears(page, page.get_by_text("draft, measured", exact=True))
        for name in ("target, measured", "draft, measured", "target's memory bound", "target's compute bound"):
            assert page.get_by_text(name, exact=True).count() >= 1  # the chart's legend
        assert page.get_by_text("Measured on this machine").count() >= 1
        page.get_by_text("This machine's roofline").first.evaluate("e => e.scrollIntoView()")
        time.sleep(1.5)
        page.screenshot(path=str(ARTIFACTS / "roofline.png"))  # the panel: heading, chart, sentence
        browser.close()
    assert (ARTIFACTS / "roofline.png").stat().st_size > 10_000


# The app is at work on the page: its script runs, or a spinner, a progress bar or a place in the work queue shows.
WORKING = """() => document.querySelector('.stApp')?.dataset.testScriptState === 'running'
  || !!document.querySelector('[data-testid="stSpinner"], [data-testid="stProgress"], [data-testid="stStatusWidget"]')
  || [...document.querySelectorAll('[data-testid="stAlert"]')].some((a) => a.innerText.includes('waiting in line'))"""
IDLE_GRACE_S = 120.0  # how long an idle app may take to show what a test waits for (a redraw after the work)
LOOK_MS = 5_000


def appears(page, locator) -> None:
    """Wait for ``locator`` as long as the app is at work (:data:`WORKING`: a busy machine's loading and measuring take
    what they take), and fail once the app has been idle for ``IDLE_GRACE_S`` without showing it: the wait follows
    the app's own progress, not a clock."""
    idle_since: float | None = None
    while True:
        try:
            locator.first.wait_for(timeout=LOOK_MS)
            return
        except PlaywrightTimeout:
            pass
        if page.evaluate(WORKING):
            idle_since = None
        elif idle_since is None:
            idle_since = time.monotonic()
        elif time.monotonic() - idle_since > IDLE_GRACE_S:
            raise AssertionError(f"the app went idle without showing {locator}: {page.inner_text('body')[:2000]}")


@contextlib.contextmanager
def chromium_page(width: int, height: int):
    """A page of Debian's chromium at this viewport, waiting as long as a busy machine needs."""
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": width, "height": height})
        page.set_default_timeout(PATIENCE_MS)
        yield page
        browser.close()


def another_page(page: Page, **options) -> Page:
    """A page of the same browser in a browser session of its own (a teacher beside a student, a fresh tab), as
    patient as the first: a page's own default wait is 30 s, which a busy 2-core machine can pass."""
    other = page.context.browser.new_page(**options)
    other.set_default_timeout(PATIENCE_MS)
    return other


def test_the_players_keys_work_from_the_page_without_a_click_into_its_frame(app_url):
    """A teacher opens the link and presses → : the round steps, with no click into the player's frame first."""
    with chromium_page(1280, 720) as page:
        page.goto(f"{app_url}/?max_new_tokens=16")
        frame = page.frame_locator("iframe").first
        frame.locator("#title").wait_for()
        assert frame.locator("#title").inner_text().startswith("Round 1 of")
        page.locator("h1").first.click()  # the page around the frame has the focus
        page.keyboard.press("ArrowRight")
        page.wait_for_function("() => location.search.includes('round=2')")
        assert frame.locator("#title").inner_text().startswith("Round 2 of")
        # Present on a projector: the app's sidebar folds away, so the round gets the width (reopened by its arrow)
        assert page.locator('[data-testid="stSidebarCollapseButton"] button').count() == 1
        frame.locator("#view-present").click()
        page.locator('[data-testid="stExpandSidebarButton"]').wait_for()
        assert frame.locator("body.present").count() == 1


@pytest.mark.parametrize("path", ["", "metrics", "Lesson_Player", "no_such_page"])
def test_a_quiz_link_on_any_path_opens_the_quiz_at_its_round(app_url, path):
    """A student's quiz link never shows a verdict first, whichever page path it names (the Round view's `/`,
    another page, or a mistyped or differently-cased path)."""
    with chromium_page(1366, 768) as page:
        page.goto(f"{app_url}/{path}?max_new_tokens=16&view=quiz&round=2")
        frame = page.frame_locator("iframe").first
        frame.locator("#view-quiz[aria-pressed='true']").wait_for()
        assert frame.locator("#title").inner_text().startswith("Round 2 of")
        assert "answer the quiz to reveal" in frame.locator("#rows").inner_text()  # the verdicts wait
        assert "lesson_player" in page.url and "view=quiz" in page.url and "max_new_tokens=16" in page.url


def test_the_round_survives_a_page_switch(app_url):
    with chromium_page(1280, 720) as page:
        page.goto(f"{app_url}/?max_new_tokens=16")
        frame = page.frame_locator("iframe").first
        frame.locator("#title").wait_for()
        frame.locator("#next").click()
        frame.locator("#next").click()
        assert frame.locator("#title").inner_text().startswith("Round 3 of")
        # the round reached the server (its rerun rewrites the link) before the switch: a person's click comes later
        # than a test's, and a rerun the player requested after a page link's click would open its own page again
        page.wait_for_function("() => location.search.includes('round=3')")
        page.get_by_role("link", name="Lesson player").click()
        page.get_by_role("heading", name="Lesson player").wait_for()
        frame = page.frame_locator("iframe").first
        frame.locator("#title").wait_for()
        assert frame.locator("#title").inner_text().startswith("Round 3 of")


# the quiz's held line (empty once every question is answered, or once the page has rerun without the player)
QUIZ_HELD = "() => document.querySelector('iframe')?.contentDocument?.getElementById('held')?.textContent ?? ''"


def answer_round(page) -> int:
    """Answer every question of the shown quiz round ("never checked" each time); the number answered."""
    questions = page.frame_locator("iframe").first.locator("button[data-guess='not_verified']")
    asked = questions.count()
    for _ in range(asked):
        questions.first.click()  # each answered question leaves the list
    return asked


def answer_every_round(page, count: int, next_round: Callable[[int], None]) -> None:
    """Answer the quiz's ``count`` rounds one by one, ``next_round(k)`` stepping to round k, until nothing is held
    (a round that drafted nothing asks nothing: the rounds after the last question need no step)."""
    for index in range(1, count + 1):
        answer_round(page)
        if not page.evaluate(QUIZ_HELD):
            return
        next_round(index + 1)


LOGGED = re.compile(r"(computed|abandoned|received from another replica) (.+) ([0-9a-f]{12}) in [0-9.]+ s for")
PREDICTED = re.compile(r"\((about \d+ (s|min)|under a second) here")


def logged_computations(server: Server) -> list[tuple[str, str]]:
    """(label, key digest) of every shared computation the server logged (specviz.serving.sharedwork)."""
    return [(m[2], m[3]) for m in map(LOGGED.search, list(server.lines)) if m]


def test_opening_a_page_as_a_fresh_visitor_starts_no_computation_but_its_round(measured_machine):
    """Parallel verification, Recursive, What if and the Losslessness lab opened by typed links on a fresh server: each
    shows its costly work's button with the estimate, and the server's log shows no computation but the link's one
    round trace (the headline's prediction of it is arithmetic on the stored profile, computed by no work)."""
    pages = (
        ("parallel_verification", "Time the passes now"),
        ("recursive", "Decode with the tree"),
        ("what_if", "Decode the second run"),
        ("losslessness", "Sample the first drafted token"),  # nothing sampled before the press
    )
    with running_server() as server, chromium_page(1280, 900) as page:
        for path, button in pages:
            page.goto(f"{server.url}/{path}?max_new_tokens=8")
            start = page.get_by_role("button", name=re.compile(re.escape(button)))
            appears(page, start)
            assert PREDICTED.search(start.inner_text()), (path, start.inner_text())  # its estimate, before the press
        page.wait_for_timeout(3_000)  # a computation started on opening would be running by now
        assert page.locator('[data-testid="stProgress"]').count() == 0
        logged = logged_computations(server)
    assert {label for label, _ in logged} <= {"Decoding"}, logged
    assert len({digest for label, digest in logged if label == "Decoding"}) == 1, logged  # the round's trace, once


def test_a_students_link_reads_the_class_results_and_cannot_re_time_the_race(app_url):
    """A student's link (student=1, as the sidebar's Copy link for students writes it) starts no race and offers no
    Measure again, before the teacher's link measured the race and after: the race strikes the rejected drafts, so
    the quiz comes first; once it is answered the class's race is shown, not re-timed. A sidebar click keeps it a
    student's."""
    link = f"{app_url}/race?max_new_tokens=8&seed=5"
    measure = re.compile("^Measure")
    held = "it opens once your quiz has answered every round"
    with chromium_page(1366, 768) as student:
        student.goto(f"{link}&student=1")
        student.get_by_text(held).wait_for()
        assert student.get_by_role("button", name=measure).count() == 0
        teacher = another_page(student)  # the teacher, in a browser session of their own
        teacher.set_default_timeout(300_000)
        teacher.goto(link)
        teacher.get_by_role("button", name=re.compile("Measure the race on this server")).click()
        teacher.get_by_role("button", name=re.compile("Measure again")).wait_for()  # the teacher's link can re-time
        student.goto(f"{link}&student=1")
        student.get_by_text(held).wait_for()
        assert student.get_by_role("button", name=measure).count() == 0
        frame = student.frame_locator("iframe").first
        count = int(re.search(r"of (\d+)", frame.locator("#title").inner_text()).group(1))
        answer_every_round(student, count, lambda _: frame.locator("#next").click())
        frame.get_by_role("button", name=re.compile("Replay the race")).wait_for()
        assert student.get_by_role("button", name=measure).count() == 0  # the class's race, shown, not re-timed
        student.get_by_role("link", name="Metrics and theory").click()
        student.wait_for_url(re.compile(r"/metrics\?.*student=1"))


RACE_FIGURES = """() => [...document.querySelectorAll('[data-testid="stMetric"]')]
  .map((m) => m.innerText).join(' | ')"""


def test_the_class_race_stays_the_teachers_when_a_student_opens_the_address_bar_link(app_url):
    """The teacher measures the race and shares the address bar's link (no student mark). A student who opens it in
    a browser of their own and presses Measure again sees that measurement as their own, shown to them alone; the
    teacher's race page, reloaded, still shows the race it measured (the same lane times and speedup), and the
    teacher's own Measure again still replaces it for the class."""
    link = f"{app_url}/race?max_new_tokens=8&seed=11"
    again = re.compile("^Measure again")
    with chromium_page(1366, 768) as teacher:
        teacher.goto(link)
        teacher.get_by_role("button", name=re.compile("Measure the race on this server")).click()
        teacher.get_by_role("button", name=again).wait_for()
        teacher.locator('[data-testid="stMetric"]').first.wait_for()
        measured = teacher.evaluate(RACE_FIGURES)
        student = another_page(teacher, viewport={"width": 1366, "height": 768})  # a browser of their own
        student.set_default_timeout(600_000)
        student.goto(teacher.url)  # the address bar's link, as most teachers share it
        student.get_by_role("button", name=again).click()
        student.get_by_text("Your own measurement, shown to you alone").wait_for()
        assert student.evaluate(RACE_FIGURES) != measured  # the student sees their own lanes
        teacher.reload()
        teacher.get_by_role("button", name=again).wait_for()
        teacher.locator('[data-testid="stMetric"]').first.wait_for()
        assert teacher.evaluate(RACE_FIGURES) == measured  # the class's race is the teacher's
        assert teacher.get_by_text("Your own measurement").count() == 0
        teacher.get_by_role("button", name=again).click()  # and the teacher may still replace it (a run the load
        # noisy is said, and the quiet race stays shown)
        teacher.wait_for_function(
            f"() => ({RACE_FIGURES})() !== {measured!r} || document.body.innerText.includes('was noisy')",
        )


CUT_LABELS = """() => Array.from(document.querySelectorAll('[data-testid="stMetricLabel"]'), (label) =>
  [label.innerText, Math.max(...[label, ...label.querySelectorAll('*')].map((e) => e.scrollWidth - e.clientWidth))])
  .filter(([, over]) => over > 0)"""


def test_the_metrics_labels_are_whole_at_1280_px(app_url):
    """At 1280x720 with the sidebar open, every metric label of the Metrics page shows whole (none ends in an
    ellipsis), the live timing's too: measured once the page settled, failing with the labels cut and by how much."""
    with chromium_page(1280, 720) as page:
        page.goto(f"{app_url}/metrics?max_new_tokens=12")
        page.get_by_role("button", name=re.compile("Time both decoders now")).click()
        page.get_by_text("timed ratio", exact=True).wait_for()
        assert page.get_by_text("tokens/round, Eq. 1", exact=True).count() == 1
        with contextlib.suppress(
            PlaywrightTimeout
        ):  # the fonts and the columns settle: as long as a busy machine needs
            page.wait_for_function(f"() => ({CUT_LABELS})().length === 0", timeout=SETTLE_MS)
        assert page.evaluate(CUT_LABELS) == []  # [label, pixels it overflows]


DRAFT_CHOICES = {"float32": "float32", "bfloat16": "bfloat16", "int8": "int8 weights", "int4": "int4 weights"}


def test_a_precision_picked_in_the_sidebar_opens_on_the_fastest_draft_measured_for_it(app_url):
    """#52 as a teacher meets it: a click on the sidebar's other lesson precision moves γ, the draft's precision and
    its confidence exit to the fastest measured for a target in it on this machine (the app measures both lesson
    precisions when it starts), and the Precision page says which; the link carries them to a fresh tab."""
    with chromium_page(1400, 1000) as page:
        page.goto(f"{app_url}/numerics")
        precision = page.get_by_role("radiogroup", name="Precision", exact=True)
        precision.wait_for()
        exact = precision.get_by_role("radio", name="float32 (exact)", exact=True).is_checked()
        other = "bfloat16" if exact else "float32"
        before = page.get_by_role("slider", name=re.compile("Block size γ")).input_value()
        precision.get_by_text("bfloat16" if exact else "float32 (exact)", exact=True).click()
        said = page.get_by_text(re.compile(rf"The fastest draft replayed here for a {other} target: "))
        said.first.wait_for()
        draft, fastest, stop = re.findall(
            rf"for a {other} target: (\w+) at γ = (\d+)(, stopping below max q = [0-9.]+)?", said.first.inner_text()
        )[0]
        gamma = str(max(3, int(fastest)))  # the lesson opens on a block to verify (at least 3), the fastest named
        assert page.get_by_role("slider", name=re.compile("Block size γ")).input_value() == gamma
        if gamma != before:  # what the click moved is said in one line of the sidebar
            moved = page.locator('[data-testid="stSidebar"]').get_by_text(f"γ {before} → {gamma}")
            assert moved.count() == 1, page.locator('[data-testid="stSidebar"]').inner_text()
        drafts = page.get_by_role("radiogroup", name="Draft precision", exact=True)
        assert drafts.get_by_role("radio", name=DRAFT_CHOICES[draft], exact=True).is_checked()
        page.wait_for_url(re.compile(rf"dtype={other}"))
        fresh = another_page(page, viewport={"width": 1400, "height": 1000})
        fresh.set_default_timeout(600_000)
        fresh.goto(page.url)
        fresh.get_by_text(re.compile(rf"The fastest draft replayed here for a {other} target: ")).first.wait_for()
        slider = fresh.get_by_role("slider", name=re.compile("Block size γ"))
        assert slider.input_value() == gamma and (stop == "") == ("confidence_exit" not in page.url)


QUANTISED_CHOICES = {  # the sidebar's Precision options
    "int8": "int8 (exact to the int8 target; CPU)",
    "int4": "int4 (exact to the int4 target; CPU)",
}


@pytest.mark.parametrize("dtype", list(QUANTISED_CHOICES))
def test_a_quantised_target_is_chosen_by_a_sidebar_click_carried_by_its_link_and_raced_exactly(app_url, dtype):
    """#52 as a teacher meets it: a click on the sidebar's int8 (or int4) precision writes ``dtype=int8`` into the
    page's link; that link, typed into a fresh tab, opens the Race page on that target, and the race measured there
    says its text is identical to that target's own, naming it as the one that decided."""
    choice = QUANTISED_CHOICES[dtype]
    with chromium_page(1400, 1000) as page:
        page.goto(f"{app_url}/race?max_new_tokens=8&seed=7")
        page.get_by_role("button", name=re.compile("Measure the race on this server")).wait_for()
        page.get_by_text(choice).click()
        page.wait_for_url(re.compile(rf"dtype={dtype}"))
        link = page.url
        fresh = another_page(page, viewport={"width": 1400, "height": 1000})
        fresh.set_default_timeout(600_000)
        fresh.goto(link)
        assert fresh.get_by_role("radio", name=choice, exact=True).is_checked()
        fresh.get_by_role("button", name=re.compile("Measure the race on this server")).click()
        verdict = fresh.get_by_text(re.compile(rf"Identical: \d+ of \d+ tokens, to the {dtype} target as run"))
        verdict.or_(fresh.locator('[data-testid="stException"]')).first.wait_for()
        said = verdict.first.inner_text()
        same, total = (int(n) for n in re.findall(r"Identical: (\d+) of (\d+)", said)[0])
        assert same == total >= 8 and "attention one row at a time" in said


def test_the_roofline_view_shows_llama_cpps_measured_passes(app_url, stored_capture):  # noqa: F811
    """#52 as a class meets it: on the Parallel verification page, opened by its link, llama.cpp's pass over k tokens
    measured on this machine (a real llama-bench capture, kept as this CPU's) stands beside the app's roofline."""
    with chromium_page(1400, 1000) as page:
        page.goto(f"{app_url}/parallel_verification?max_new_tokens=4")
        said = page.get_by_text(re.compile("^llama.cpp on this CPU")).first
        said.wait_for()
        ms = stored_capture.pass_ms
        assert f"costs {stored_capture.relative()[-1]:.1f} of its one-token steps" in said.inner_text()
        assert (
            f"({ms[-1]:.0f} ms against {ms[0]:.0f} ms)" in said.inner_text()
        )  # its table: AppTest, test_llamacpp_passes


def test_the_roofline_view_shows_the_int4_targets_measured_passes_by_a_tab_and_a_toggle(app_url):
    """#52 as a class meets it: on the Parallel verification page a teacher clicks the int4 tab and its toggle, and
    the pair loads in int4 and its pass over k + 1 tokens, measured on this machine, is shown beside the sidebar's
    precision."""
    with chromium_page(1400, 1000) as page:
        page.goto(f"{app_url}/parallel_verification?max_new_tokens=4")
        page.get_by_role("tab", name="int4").click()
        page.get_by_text("Load the pair in int4 and show its roofline").click()
        said = page.get_by_text(re.compile(r"^Measured on this machine .* in int4 on the package.s int4 kernel")).first
        said.wait_for(timeout=600_000)
        costs = re.search(r"v\(k\) = ([0-9., ]+) one-token steps for k = 1\.\.(\d+)", said.inner_text())
        assert costs is not None
        values = [float(v) for v in costs.group(1).rstrip(", ").split(", ")]
        assert len(values) == int(costs.group(2)) and all(v > 0 for v in values)


def test_a_draft_confidence_exit_from_a_link_stops_a_round_early_and_the_round_says_why(app_url):
    """A teacher's link sets the draft model's confidence exit: the round view (stepped with the arrow key) shows a
    round that drafted fewer than γ tokens and says why (the draft's top probability under the exit), and the link
    the page keeps carries the setting."""
    with chromium_page(1500, 1700) as page:
        page.goto(f"{app_url}/?max_new_tokens=16&gamma=6&confidence_exit=0.9")
        player = page.frame_locator("iframe").first
        player.locator("#seed .sv-rows").wait_for(timeout=600_000)
        stopped = player.locator("#seed .sv-note", has_text="drafting stopped")
        for _ in range(8):  # step until a round the exit stopped (most do at 0.9)
            if stopped.count():
                break
            player.locator("body").press("ArrowRight")
        said = re.search(r"max q = ([0-9.]+), below the exit's 0\.90", stopped.first.inner_text())
        assert said is not None and float(said.group(1)) < 0.9
        draft_row = player.locator("#seed .sv-row", has=player.locator(".sv-label", has_text="Draft")).first
        assert 0 < draft_row.locator("[title^='q=']").count() < 6  # the round's drafted boxes: fewer than γ
        assert "confidence_exit=0.9" in page.url


def test_the_race_page_says_when_no_draft_pays_here_and_names_the_closest(app_url, tiny_params):
    """Where this machine's replay finds no draft that beats the target alone for a pair (as on a GPU whose target step
    costs little more than the draft's), a teacher who opens the Race page on it reads so, with the configuration that
    comes closest, before measuring anything. The pair's defaults are a stored file, as ``python -m specviz machine``
    writes it."""
    from urllib.parse import urlencode

    from specviz.analysis.defaults import PRECISIONS, store_defaults
    from specviz.analysis.replay import FastestDraft, MeasuredDefaults

    closest = {dtype: FastestDraft("float32", 2, 0.64, 30.0, 0.9) for dtype in PRECISIONS}
    stored = MeasuredDefaults("float32", 3, "stored here", "float32", closest)
    store_defaults(tiny_params["target"], tiny_params["draft"], "cpu", stored)
    with chromium_page(1366, 768) as page:
        page.goto(f"{app_url}/race?{urlencode(tiny_params)}")
        said = page.get_by_text("No draft pays for a float32 target on this machine")
        said.wait_for()
        assert "the closest, the draft model in float32 at γ = 2, stopping below max q = 0.9, replays at 0.64×" in (
            said.inner_text()
        )


def test_every_speed_page_names_the_same_fastest_configuration(app_url, tiny_params):
    """#70 item 6: Race, Round view, Gamma sweep and Parallel verification name one fastest configuration for a pair on
    this machine, the quiet replay's stored for it (as ``python -m specviz machine`` writes it), worded as a
    prediction, beside a sidebar that drafts another γ."""
    from urllib.parse import urlencode

    from specviz.analysis.defaults import PRECISIONS, store_defaults
    from specviz.analysis.replay import FastestDraft, MeasuredDefaults

    fastest = {dtype: FastestDraft("bfloat16", 5, 1.4, 50.0, 0.0) for dtype in PRECISIONS}
    store_defaults(
        tiny_params["target"], tiny_params["draft"], "cpu", MeasuredDefaults("float32", 3, "", None, fastest)
    )
    named = "This machine's fastest for this pair in float32: γ = 5, the draft in bfloat16 (predicted 1.40×"
    with chromium_page(1366, 900) as page:
        for path in ("race", "", "gamma_sweep", "parallel_verification"):
            page.goto(f"{app_url}/{path}?{urlencode(tiny_params)}")
            said = page.get_by_text("This machine's fastest for this pair")
            appears(page, said)
            assert said.count() == 1 and named in said.inner_text(), (path, said.inner_text())
            assert "this trace drafts γ = 3" in said.inner_text()
