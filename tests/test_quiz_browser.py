"""The lesson player in the app as a student and a teacher meet it (issue #51), in Chromium, driven only by clicks,
keys, typed links, Back/Forward and reload: a quiz link shows no verdict before its questions are answered, however
the student tries to leave it; every drafted token is asked (the never checked ones too); the student's round
travels with them; and the present view fits a 1280x720 projector however it was opened, for every block size a
machine's profile may pick. Each measure is taken once the page has settled, and fails with the numbers it saw."""

from __future__ import annotations

import re
import time

import pytest

from .test_browser import ARTIFACTS, answer_every_round, answer_round, chromium_page, running_app

pytestmark = [pytest.mark.browser, pytest.mark.slow]

WAIT_MS = 300_000  # a trace of the embedded pair on a busy 2-core machine: minutes at worst, never forever


@pytest.fixture(scope="module")
def app_url(measured_machine):  # the de-quantised cache and this machine's defaults exist, as after a first start
    with running_app() as url:
        yield url


def settled(page) -> None:
    """The page's script run has ended and the player is drawn in its frame (bounded waits)."""
    page.wait_for_function(
        "() => document.querySelector('.stApp')?.dataset.testScriptState === 'notRunning'", timeout=WAIT_MS
    )
    page.frame_locator("iframe").first.locator("#title").wait_for(timeout=WAIT_MS)


# What the player shows: its pressed view, its title, the verdicts on screen (a ✓ or ✗ over a drafted token, an
# acceptance test spelled out) and which of its view buttons are closed, and why.
PLAYER = """() => { const doc = document.querySelector('iframe').contentDocument;
  const shown = (e) => e.getClientRects().length, tests = [...doc.querySelectorAll('.test')].filter(shown);
  const marks = [...doc.querySelectorAll('#seed .sv-verify .sv-mark span')].filter(shown).map((m) => m.textContent);
  return {view: doc.querySelector('button.view[aria-pressed=true]').dataset.view,
          title: doc.getElementById('title').textContent,
          verdicts: marks.filter((m) => m === '✓' || m === '✗').length + tests.length,
          closed: [...doc.querySelectorAll('button.view')].filter((b) => b.disabled).map((b) => b.dataset.view),
          asked: [...doc.querySelectorAll('button[data-guess]')].filter(shown).length,
          held: doc.getElementById('held')?.textContent ?? ''}; }"""
NOTHING_DRAFTED = "nothing drafted"  # a round that drafted nothing (the budget's last token): the target's own step


def assert_quiz_waits(page, round_index: int) -> dict:
    """The quiz at ``round_index``, its verdicts hidden; a round that drafted nothing asks nothing, and says so.
    Returns what the player showed."""
    seen = page.evaluate(PLAYER)
    assert seen["view"] == "quiz" and seen["title"].startswith(f"Round {round_index} of"), seen
    if NOTHING_DRAFTED in seen["title"]:
        assert seen["asked"] == 0 and seen["title"].endswith("(nothing to ask)"), seen
    else:
        assert seen["verdicts"] == 0 and seen["asked"] > 0 and "accepted" not in seen["title"], seen
    return seen


@pytest.mark.parametrize("path", ["lesson_player", "metrics"])
def test_a_quiz_link_shows_no_verdict_before_its_answers(app_url, path):
    """A student's quiz link (typed into the lesson player's path, or into another page's, which the app turns into
    the lesson player) cannot be made to show a verdict by Step, Present or Race, the keys, a reload or Back: the
    link's every history entry opens the quiz (streamlit pushes an entry for each new address: the canonical link
    keeps view=quiz)."""
    with chromium_page(1366, 768) as page:
        page.goto(f"{app_url}/{path}?max_new_tokens=16&view=quiz&round=2")
        settled(page)
        assert_quiz_waits(page, 2)
        frame = page.frame_locator("iframe").first
        for view in ("step", "present", "race"):
            frame.locator(f"#view-{view}").click(force=True)  # a closed button: the click does nothing
            assert_quiz_waits(page, 2)
        seen = page.evaluate(PLAYER)  # and the student is told why
        assert seen["closed"] == ["step", "present", "race"] and "every question is answered" in seen["held"], seen
        page.locator("h1").first.click()  # the keys, from the page around the frame
        page.keyboard.press("ArrowRight")  # held: the next round's context is this one's outcome
        assert_quiz_waits(page, 2)
        assert "or Skip" in page.evaluate(PLAYER)["held"]
        answer_round(page)
        page.keyboard.press("ArrowRight")
        assert_quiz_waits(page, 3)
        page.wait_for_function("() => location.search.includes('round=3')")
        page.reload()  # the link as the address bar now holds it
        settled(page)
        assert_quiz_waits(page, 3)
        assert "view=quiz" in page.url
        backs = 0
        while page.url.startswith(app_url) and backs < 3:  # every entry opening made, back to the typed link
            page.go_back()
            backs += 1
            if not page.url.startswith(app_url):
                break  # before the link: the tab's blank page
            settled(page)
            seen = page.evaluate(PLAYER)
            assert "view=quiz" in page.url and seen["view"] == "quiz", (backs, page.url, seen)
            assert seen["verdicts"] == 0 or seen["title"].startswith("Round 2 of"), (backs, page.url, seen)  # answered
        assert backs >= 1


COUNTS = re.compile(r"\d+\s*(/|of)\s*\d+\s+drafted (tokens|tree nodes) accepted")  # the counts a quiz must hide
TOTALS = """() => { const doc = document.querySelector('iframe').contentDocument;
  const shown = (e) => e.getClientRects().length;
  const inFrame = [...doc.querySelectorAll('body *')].filter((e) => shown(e) && e.children.length === 0)
    .map((e) => e.textContent).join(' ');
  return inFrame + ' ' + document.querySelector('[data-testid="stMain"]').innerText; }"""


def test_a_quiz_round_opens_the_next_only_once_answered_or_skipped(app_url):
    """A student's quiz: no accepted count anywhere on the screen (the player's summary line included) while a question
    waits; Next, →, End and the slider stay on the unanswered round; Skip reveals its verdicts and scores its questions
    as asked and unanswered; then Next opens the next round."""
    with chromium_page(1366, 768) as page:
        page.goto(f"{app_url}/lesson_player?max_new_tokens=16&view=quiz&student=1")
        settled(page)
        assert_quiz_waits(page, 1)
        assert not COUNTS.search(page.evaluate(TOTALS)), page.evaluate(TOTALS)
        frame = page.frame_locator("iframe").first
        frame.locator("#next").click()
        frame.locator("#last").click()
        page.locator("h1").first.click()
        page.keyboard.press("End")
        assert_quiz_waits(page, 1)
        asked = frame.locator("button[data-guess='not_verified']").count()
        frame.get_by_role("button", name=re.compile("^Skip")).click()
        seen = page.evaluate(PLAYER)
        assert seen["title"].startswith("Round 1 of") and seen["verdicts"] > 0, seen  # revealed
        assert frame.locator("#score").inner_text() == f"Score: 0 / {asked} ({asked} skipped)"
        assert frame.locator(".quiz").all_inner_texts()[0].startswith("Skipped: the target's answer:")
        frame.locator("#next").click()
        assert_quiz_waits(page, 2)
        assert not COUNTS.search(page.evaluate(TOTALS))


ROUND_VIEW_OUTPUT = "Output (colour: how each token was produced"


def test_a_students_session_keeps_every_page_in_the_quiz_until_it_is_answered(app_url):
    """A student's link (student=1) that opens the Round view and Metrics from the sidebar meets the quiz there,
    with neither the colour-coded output nor any accepted count, and the sidebar's settings kept from page to page
    (the Race page too: its replay strikes the rejected drafts), until every round is answered: then the page
    reruns itself and shows them."""
    with chromium_page(1366, 768) as page:
        page.goto(f"{app_url}/lesson_player?max_new_tokens=8&view=quiz&student=1")
        settled(page)
        count = int(re.search(r"of (\d+)", page.evaluate(PLAYER)["title"]).group(1))
        assert count >= 2
        nav = page.locator('[data-testid="stSidebarNav"]')
        for name in ("Round view", "Race", "Metrics and theory", "Round view"):
            nav.get_by_role("link", name=name).click()
            page.get_by_text("it opens once your quiz has answered every round").wait_for(timeout=WAIT_MS)
            settled(page)
            assert_quiz_waits(page, 1)
            assert page.evaluate(PLAYER)["title"].startswith(f"Round 1 of {count}")  # the same settings' rounds
            assert ROUND_VIEW_OUTPUT not in page.evaluate(TOTALS) and not COUNTS.search(page.evaluate(TOTALS))

        def next_round(index: int) -> None:
            page.keyboard.press("ArrowRight")
            assert_quiz_waits(page, index)

        answer_every_round(page, count, next_round)
        page.get_by_text(ROUND_VIEW_OUTPUT).wait_for(timeout=WAIT_MS)  # every round answered: the page shows it all
        assert page.get_by_text("drafted tokens accepted").count() >= 1


def test_a_round_that_drafted_nothing_asks_nothing_and_holds_nothing(app_url):
    """One new token leaves no room for a draft beside the target's own token: the round drafted nothing, so the quiz
    says so and asks nothing, and a student's Round view, held only by unanswered questions, opens on its output.
    The quiz is answered as it opens, so the page it opened on is drawn once: no rerun draws its player again (the CI
    run of 2026-11-29 read the player while such a rerun replaced it)."""
    with chromium_page(1366, 768) as page:
        drawn: list[str] = []
        page.on("framenavigated", lambda frame: drawn.append(frame.url) if frame != page.main_frame else None)
        page.goto(f"{app_url}/lesson_player?max_new_tokens=1&view=quiz&student=1")
        settled(page)
        seen = assert_quiz_waits(page, 1)
        assert seen["title"].startswith("Round 1 of 1: nothing drafted"), seen
        assert len(drawn) == 1, drawn
        page.locator('[data-testid="stSidebarNav"]').get_by_role("link", name="Round view").click()
        page.get_by_text(ROUND_VIEW_OUTPUT).wait_for(timeout=WAIT_MS)
        assert page.get_by_text("it opens once your quiz has answered every round").count() == 0


def test_a_student_who_answered_every_round_still_sees_them_after_a_reload(app_url):
    """A student answers the whole quiz on the Round view, which then shows the output; a reload (a new server session,
    the tab's answers kept) opens the output again, not the quiz's hold: the player tells the server what it restored
    though it drew before the page listened."""
    with chromium_page(1366, 768) as page:
        page.goto(f"{app_url}/?max_new_tokens=8&student=1")
        page.get_by_text("it opens once your quiz has answered every round").wait_for(timeout=WAIT_MS)
        settled(page)
        count = int(re.search(r"of (\d+)", page.evaluate(PLAYER)["title"]).group(1))
        answer_every_round(page, count, lambda _: page.keyboard.press("ArrowRight"))
        page.get_by_text(ROUND_VIEW_OUTPUT).wait_for(timeout=WAIT_MS)
        page.reload()
        page.get_by_text(ROUND_VIEW_OUTPUT).wait_for(timeout=WAIT_MS)
        settled(page)
        assert page.get_by_text("it opens once your quiz has answered every round").count() == 0


def test_the_students_link_names_the_round_the_player_shows(app_url):
    """The teacher steps the player to round 3 and opens "Copy link for students (quiz)": its link opens the quiz at
    round 3 (round=3, view=quiz, student=1), as the caption promises."""
    with chromium_page(1366, 768) as page:
        page.goto(f"{app_url}/?max_new_tokens=16")
        settled(page)
        page.locator("h1").first.click()
        page.keyboard.press("ArrowRight")
        page.keyboard.press("ArrowRight")
        page.wait_for_function("() => location.search.includes('round=3')", timeout=WAIT_MS)
        page.get_by_text("Copy link for students (quiz)").click()
        link = page.get_by_test_id("students-link")
        page.wait_for_function(
            "() => [...document.querySelectorAll('*')].some((e) => e.shadowRoot?.querySelector('code')"
            "?.textContent.includes('round=3'))",
            timeout=WAIT_MS,
        )
        text = link.inner_text()
        assert "round=3" in text and "view=quiz" in text and "student=1" in text, text


MARK_COLOURS = {"rgb(46, 125, 50)": "accept", "rgb(198, 40, 40)": "reject", "rgb(158, 158, 158)": "never checked"}
VERDICTS = """() => { const doc = document.querySelector('iframe').contentDocument;
  return [...doc.querySelectorAll('#seed .sv-verify .sv-mark span')].filter((m) => m.textContent !== '+')
    .map((m) => getComputedStyle(m).color); }"""


def test_every_drafted_token_is_asked_and_the_round_travels_to_the_race(app_url):
    """At γ = 8 a round's first rejection leaves tokens the target never checks: each is asked all the same, with
    "never checked" among the answers. Answered as never checked, every question's verdict matches the round's
    revealed Verify row; once the whole quiz is answered the other views open, and the round the student stands on
    travels to the Race view and to the Race page (round=k stays k)."""
    with chromium_page(1366, 768) as page:
        page.goto(f"{app_url}/lesson_player?max_new_tokens=32&gamma=8&view=quiz")
        settled(page)
        frame = page.frame_locator("iframe").first
        count = int(re.search(r"of (\d+)", page.evaluate(PLAYER)["title"]).group(1))
        asked = never_checked = 0
        for index in range(1, count + 1):
            title = page.evaluate(PLAYER)["title"]
            drafted = 0 if NOTHING_DRAFTED in title else int(re.search(r": (\d+) drafted tokens", title).group(1))
            questions = frame.locator("button[data-guess='not_verified']")
            assert questions.count() == drafted == frame.locator("#rows .tok.draft").count(), (index, title)
            for _ in range(drafted):
                questions.first.click()  # each answered question leaves the list
            asked += drafted
            verdicts = [MARK_COLOURS[colour] for colour in page.evaluate(VERDICTS)]
            said = frame.locator(".quiz").all_inner_texts()
            assert len(verdicts) == len(said) == drafted, (index, verdicts, said)
            for verdict, line in zip(verdicts, said):  # right exactly where the target never checked the token
                assert line.endswith("right.") == (verdict == "never checked"), (index, verdict, line)
                assert line.endswith("right.") or line.endswith(f"answer: {verdict}."), (index, verdict, line)
            never_checked += verdicts.count("never checked")
            assert frame.locator("#score").inner_text().endswith(f"/ {asked}")
            if index < count:  # the other views stay closed while a question of a later round waits
                seen = page.evaluate(PLAYER)
                assert seen["closed"] == (["step", "present", "race"] if seen["held"] else []), (index, seen)
                page.keyboard.press("ArrowRight")
        assert never_checked > 0  # a round went on after its first rejection, and its tokens were asked
        assert page.evaluate(PLAYER)["closed"] == [] and page.evaluate(PLAYER)["held"] == ""
        stand = count - 1
        page.keyboard.press("ArrowLeft")
        frame.locator("#view-race").click()
        page.wait_for_function(
            f"() => /[?&]round={stand}(&|$)/.test(location.search) && /view=race/.test(location.search)"
        )
        time.sleep(1)  # the player tells the server its place a moment after the stepping stops
        page.locator('[data-testid="stSidebarNav"]').get_by_role("link", name="Race").click()
        page.wait_for_function(  # the Race page has written its link (its first act, before any work)
            "() => location.pathname.endsWith('/race') && location.search.includes('prompt=')", timeout=WAIT_MS
        )
        assert f"round={stand}" in page.url, page.url


PRESENT_FIT = """() => { const PAGE_HEADINGS = '[data-testid="stMain"] :is([data-testid="stHeading"], '
    + '[data-testid="stCaptionContainer"])';
  const frame = document.querySelector('iframe'), doc = frame.contentDocument;
  const at = frame.getBoundingClientRect(), box = (e) => { const b = e.getBoundingClientRect();
    return {left: b.left + at.left, top: b.top + at.top, right: b.right + at.left, bottom: b.bottom + at.top}; };
  const shown = (e) => e.getClientRects().length > 0, card = doc.querySelector('#cards .card.shown');
  const rows = [...doc.querySelectorAll('#seed .sv-row')].filter(shown).map(box);
  const draft = [...doc.querySelectorAll('#seed .sv-row')]
    .find((r) => r.querySelector('.sv-label').textContent === 'Draft');
  const drafted = [...draft.querySelectorAll('.sv-tok')].filter((t) => t.title.startsWith('q=')).map(box);
  const size = (e) => { const svg = e.closest('svg'), px = parseFloat(doc.defaultView.getComputedStyle(e).fontSize);
    return svg ? px * svg.getBoundingClientRect().width / svg.viewBox.baseVal.width : px * e.currentCSSZoom; };
  const texts = [...card.querySelectorAll('*')]
    .filter((e) => e.children.length === 0 && e.textContent.trim() && shown(e));
  const title = box(doc.querySelector('header h1')), header = document.querySelector('[data-testid="stHeader"]');
  return {rows: rows.length, rowsBottom: Math.max(...rows.map((r) => r.bottom)), drafted: drafted.length,
          draftedRight: Math.max(...drafted.map((t) => t.right)), test: box(card.querySelector('.test')),
          testPx: size(card.querySelector('.test')), smallestPx: Math.min(...texts.map(size)),
          zoom: doc.querySelector('main').currentCSSZoom, title, headerBottom: header.getBoundingClientRect().bottom,
          pageHeadings: [...document.querySelectorAll(PAGE_HEADINGS)].filter(shown).length,
          frameHeight: at.height, playerHeight: doc.body.getBoundingClientRect().height,
          screen: [window.innerWidth, window.innerHeight]}; }"""


def measured_once_settled(page) -> dict:
    """The present view's measures once two readings half a second apart agree (the fit and the page's layout have
    settled), or the last reading after 30 s."""
    settled(page)
    page.frame_locator("iframe").first.locator("#cards .card.shown .test").wait_for(timeout=WAIT_MS)
    seen = page.evaluate(PRESENT_FIT)
    for _ in range(60):
        time.sleep(0.5)
        seen, before = page.evaluate(PRESENT_FIT), seen
        if seen == before:
            break
    return seen


def assert_fits_the_projector(seen: dict, drafted: int) -> None:
    width, height = seen["screen"]
    assert seen["rows"] == 6 and seen["drafted"] == drafted, seen  # the round's six rows, every drafted token
    assert seen["rowsBottom"] <= height and seen["draftedRight"] <= width, seen
    test = seen["test"]
    assert 0 <= test["top"] and test["bottom"] <= height and test["right"] <= width, seen  # the test, on screen
    assert seen["title"]["top"] >= seen["headerBottom"] - 1 and seen["title"]["bottom"] > seen["title"]["top"], seen
    assert seen["pageHeadings"] == 0, seen  # the page's title and caption leave the screen to the round
    assert abs(seen["frameHeight"] - seen["playerHeight"]) <= 2, seen  # the frame holds the player, no blank band
    assert seen["testPx"] >= 20 and seen["smallestPx"] >= 12, seen  # read from the back of the room


@pytest.mark.parametrize("gamma", range(2, 9))
def test_the_present_view_fits_a_projector_in_the_app(app_url, gamma):
    """A teacher's projector at 1280x720, for every block size a machine's profile may pick (γ = 2..8, set by the
    link): opened by the player's Present button and by a `view=present` link, the round's six rows with every
    drafted token and the shown card's acceptance test are on the screen with no scrolling, the lesson's title below
    streamlit's header, the page's own title and caption gone, the test in large type."""
    link = f"{app_url}/lesson_player?max_new_tokens=16&gamma={gamma}&round=2"
    with chromium_page(1280, 720) as page:
        page.goto(link)
        settled(page)
        drafted = page.frame_locator("iframe").first.locator("#seed .sv-row .sv-tok[title^='q=']").count()
        page.frame_locator("iframe").first.locator("#view-present").click()
        by_button = measured_once_settled(page)
        page.screenshot(path=str(ARTIFACTS / f"present-button-gamma{gamma}.png"))
        page.goto(f"{link}&view=present")
        by_link = measured_once_settled(page)
        page.screenshot(path=str(ARTIFACTS / f"present-link-gamma{gamma}.png"))
    assert_fits_the_projector(by_button, drafted)
    assert_fits_the_projector(by_link, drafted)


def test_back_from_a_quiz_reached_by_stepping_opens_the_quiz_not_the_verdicts(app_url):
    """A teacher steps the step view to round 2, then presses Quiz: the tab's history holds round 2's step view, and
    Back to it opens round 2's quiz (unanswered), never its verdicts; once answered, the other views open again."""
    with chromium_page(1366, 768) as page:
        page.goto(f"{app_url}/lesson_player?max_new_tokens=16")
        settled(page)
        page.locator("h1").first.click()
        page.keyboard.press("ArrowRight")
        page.wait_for_function("() => location.search.includes('round=2')", timeout=WAIT_MS)
        page.wait_for_timeout(1_000)  # the player tells the server its place once the stepping stops
        page.frame_locator("iframe").first.locator("#view-quiz").click()
        page.wait_for_function("() => location.search.includes('view=quiz')", timeout=WAIT_MS)
        page.wait_for_timeout(1_000)
        page.go_back()
        page.wait_for_function("() => !location.search.includes('view=quiz')", timeout=WAIT_MS)
        settled(page)
        seen = page.evaluate(PLAYER)  # the step view's entry: its round, unanswered, opens in the quiz
        assert seen["view"] == "quiz" and seen["verdicts"] == 0 and "accepted" not in seen["title"], seen
        answer_round(page)
        assert page.evaluate(PLAYER)["closed"] == []
