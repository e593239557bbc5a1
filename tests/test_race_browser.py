"""The race in a real browser: the standalone race page and the lesson's Race view, opened offline from files."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import sync_playwright

from specviz.analysis.claims import speedup_words
from specviz.analysis.race import Race, run_race
from specviz.config import DecodeConfig
from specviz.engine import load_pair, speculative_decode
from specviz.presentation.player import lesson_html
from specviz.presentation.race import race_page
from specviz.serving.processes import CHROMIUM_ARGS

pytestmark = [pytest.mark.browser, pytest.mark.slow]

ARTIFACTS = Path(__file__).resolve().parent.parent / "artifacts"
PROMPT = "def fibonacci(n):"
COUNTS = """() => Array.from(document.querySelectorAll('.sv-race [data-part="count"]'), (e) => Number(e.textContent))"""


@pytest.fixture(scope="module")
def embedded_race(embedded) -> tuple[DecodeConfig, Race]:
    config = DecodeConfig(max_new_tokens=24, gamma=4, device="cpu")
    return config, run_race([(config, load_pair(config))], PROMPT)


def watch_the_race(page, race: Race) -> list[list[int]]:
    """Start the race at a tenth of its speed with the space key; the lanes' token counts, sampled until the end."""
    page.select_option('.sv-race [data-race="speed"]', "0.1")
    page.locator("body").click(position={"x": 5, "y": 5})
    page.keyboard.press(" ")
    seen = []
    while not page.locator('.sv-race [data-race="result"]').inner_text().strip():
        seen.append(page.evaluate(COUNTS))
        page.wait_for_timeout(50)
    seen.append(page.evaluate(COUNTS))
    return seen


def assert_the_race_ran(page, race: Race, seen: list[list[int]]) -> None:
    final = [len(lane.output_ids) for lane in race.lanes]
    assert seen[-1] == final
    for lane in range(len(final)):  # each lane's text grew while the race ran, never shrank
        counts = [sample[lane] for sample in seen]
        assert counts == sorted(counts) and any(0 < c < final[lane] for c in counts), counts
    result = page.locator('.sv-race [data-race="result"]').inner_text()
    assert speedup_words(race.headline) in result and "Identical: 24 of 24 tokens" in result  # "(slower)" under 1x


def test_the_race_page_replays_offline_and_ends_with_the_measured_speedup(embedded_race, tmp_path):
    _, race = embedded_race
    path = tmp_path / "race.html"
    path.write_text(race_page(race), encoding="utf-8")
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 720})
        page.route(
            "**/*", lambda route: route.abort() if not route.request.url.startswith("file:") else route.continue_()
        )
        page.goto(path.as_uri())
        assert page.evaluate(COUNTS) == [0, 0]  # nothing before the start
        seen = watch_the_race(page, race)
        assert_the_race_ran(page, race, seen)
        lanes = page.locator(".sv-race .lanes").bounding_box()
        assert lanes["y"] + lanes["height"] <= 720  # both lanes on one projector screen
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "race-1280x720.png"))
        browser.close()


def test_the_standalone_lesson_carries_the_race_as_its_race_view(embedded_race, tmp_path):
    config, race = embedded_race
    trace = speculative_decode(config, prompt=PROMPT, pair=load_pair(config))
    path = tmp_path / "lesson.html"
    path.write_text(lesson_html(trace, race=race, view="race"), encoding="utf-8")
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 720})
        page.goto(path.as_uri())
        assert page.locator("main").is_hidden() and page.locator("#race-view").is_visible()
        seen = watch_the_race(page, race)
        assert_the_race_ran(page, race, seen)
        page.screenshot(path=str(ARTIFACTS / "lesson-race-view.png"))
        page.click("#view-step")  # back to the rounds
        assert page.locator("main").is_visible() and page.locator("#race-view").is_hidden()
        browser.close()
