"""The standalone lesson player in real Chromium, opened from file:// with the network blocked."""

from __future__ import annotations

import copy
import html
import json
import re
import subprocess
import sys

import pytest
from playwright.sync_api import sync_playwright

from specviz.engine import speculative_decode
from specviz.limits import DEFAULT_PROMPT
from specviz.presentation.boxes import display_text
from specviz.presentation.player import embedded_json, lesson_html
from specviz.registry.rules import rule_entry
from specviz.serving.processes import CHROMIUM_ARGS

from .test_browser import ARTIFACTS
from .test_engine import PROMPT, tiny_config

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.fixture(scope="module")
def sampled_trace(tiny_dirs, tiny_pair):
    trace = speculative_decode(
        tiny_config(tiny_dirs, rule="sample", gamma=3, max_new_tokens=16, seed=5), prompt_ids=PROMPT, pair=tiny_pair
    )
    assert len(trace.rounds) >= 3 and any(p.status == "rejected" for r in trace.rounds for p in r.draft)
    return trace


@pytest.fixture(scope="module")
def offline_browser():
    """Chromium with every request that is not a local file refused, and the refused ones counted."""
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        context = browser.new_context()
        refused: list[str] = []

        def guard(route):
            if route.request.url.startswith("file://"):
                route.continue_()
            else:
                refused.append(route.request.url)
                route.abort()

        context.route("**/*", guard)
        yield context, refused
        browser.close()


def write_lesson(path, trace, **options):
    path.write_text(lesson_html(trace, **options), encoding="utf-8")
    return path


def open_lesson(context, path, fragment: str = ""):
    page = context.new_page()
    page.set_default_timeout(600_000)  # bounded work; a busy machine may be slow, never wrong
    page.goto(path.as_uri() + fragment)
    page.wait_for_selector("#seed .sv-rows, #rows .label")
    return page


def round_title(page) -> str:
    """ "Round 3 of 7", without the counts that follow it."""
    return page.locator("#title").inner_text().split(":")[0]


def verdict_marks(page) -> list[str]:
    """The check or cross over each drafted token in the Verify row (render.py marks unverified ones with a grey ✗)."""
    return [m for m in page.locator("#seed .sv-verify .sv-mark").all_inner_texts() if m.strip() in ("✓", "✗")]


def test_the_lesson_renders_every_round_and_steps_with_the_keyboard(sampled_trace, offline_browser, tmp_path):
    context, refused = offline_browser
    path = write_lesson(tmp_path / "lesson.html", sampled_trace)
    page = open_lesson(context, path)
    count = len(sampled_trace.rounds)
    assert round_title(page) == f"Round 1 of {count}"
    for index, rnd in enumerate(sampled_trace.rounds, start=1):
        labels = page.locator("#seed .sv-label").all_inner_texts()
        # the round's six rows
        assert labels == ["Prompt", "Decoder input", "Draft", "Verify", "Output", "Next input"], index
        assert verdict_marks(page) == ["✓" if p.status == "accepted" else "✗" for p in rnd.draft], index
        assert page.locator("#seed .sv-struck").count() == sum(p.status != "accepted" for p in rnd.draft)
        # Output, Next input
        assert page.locator('#seed .sv-tok[title="correction"]').count() == 2 * (rnd.correction is not None)
        assert page.locator('#seed .sv-tok[title="bonus token"]').count() == 3 * (rnd.bonus is not None)  # + Verify
        assert page.locator(".card").count() == len(rnd.draft) + (rnd.correction is not None or rnd.bonus is not None)
        if index < count:
            page.keyboard.press("ArrowRight")
            assert round_title(page) == f"Round {index + 1} of {count}"
            assert f"round={index + 1}" in page.evaluate("location.hash")
    page.keyboard.press("Home")
    assert round_title(page) == f"Round 1 of {count}"
    page.keyboard.press(" ")  # autoplay: one round per 1.5 s, in the page
    page.wait_for_function("document.getElementById('title').textContent.startsWith('Round 2 of')")
    page.keyboard.press(" ")
    assert page.locator("#play").get_attribute("aria-pressed") == "false"
    page.keyboard.press("End")
    assert round_title(page) == f"Round {count} of {count}"
    at, rejected = next(
        (i, p) for i, r in enumerate(sampled_trace.rounds, start=1) for p in r.draft if p.status == "rejected"
    )
    linked = open_lesson(context, path, f"#round={at}")  # a copied link opens its round
    assert round_title(linked) == f"Round {at} of {count}"
    assert (
        f"= {rejected.accept_prob:.3f} vs u = {rejected.uniform:.3f} → reject" in linked.locator("#cards").inner_text()
    )
    assert refused == []  # the file needs nothing from the network


def test_the_quiz_scores_known_answers_and_reveals_the_verdicts(sampled_trace, offline_browser, tmp_path):
    context, _ = offline_browser
    path = write_lesson(tmp_path / "quiz.html", sampled_trace, view="quiz")
    index, rnd = next(
        (i, r) for i, r in enumerate(sampled_trace.rounds, start=1) if any(p.status == "rejected" for p in r.draft)
    )
    page = open_lesson(context, path, f"#round={index}&view=quiz")
    asked = len(rnd.draft)  # every drafted token, the never checked ones after the rejection too
    assert page.locator("#rows .mark").all_inner_texts() == ["?"] * asked  # hidden until answered
    assert page.locator(".test").count() == 0
    assert page.locator("#cards svg line").count() == 0  # the draw u is the verdict: not drawn before the answer
    page.keyboard.press("ArrowRight")  # the next round's context is this one's outcome: held until answered
    assert (
        page.locator("#title").inner_text().startswith(f"Round {index} of")
        and "Skip" in page.locator("#held").inner_text()
    )
    for position in rnd.draft:  # answer every token right
        page.locator(f'button[data-quiz="{index}:{position.index}"][data-guess="{position.status}"]').click()
    assert page.locator("#score").inner_text() == f"Score: {asked} / {asked}"
    assert "✗" in verdict_marks(page)  # revealed
    assert page.locator(".verdict-ok").count() == asked
    checked = sum(p.status != "not_verified" for p in rnd.draft)
    assert page.locator("#cards svg line").count() == checked  # and each check's draw u with it
    other = index - 1 if index > 1 else index + 1  # a round one step away: back is open, forward once answered
    page.keyboard.press("ArrowLeft" if other < index else "ArrowRight")
    assert page.locator("#title").inner_text().startswith(f"Round {other} of")
    wrong = sampled_trace.rounds[other - 1].draft[0]
    page.locator(f'button[data-quiz="{other}:0"][data-guess="{"rejected" if wrong.accepted else "accepted"}"]').click()
    assert page.locator("#score").inner_text() == f"Score: {asked} / {asked + 1}"
    assert page.locator(".verdict-bad").count() == 1


def test_the_presenter_view_shows_the_rule_in_large_type(sampled_trace, offline_browser, tmp_path):
    context, _ = offline_browser
    path = write_lesson(tmp_path / "present.html", sampled_trace)
    page = open_lesson(context, path, "#view=present")
    assert page.evaluate("document.body.classList.contains('present')")
    assert "min(1, p(x̃ᵢ)/q(x̃ᵢ))" in page.locator("#formula").inner_text()
    size = float(page.evaluate("parseFloat(getComputedStyle(document.querySelector('.sv-tok')).fontSize)"))
    page.locator("#view-step").click()
    assert float(page.evaluate("parseFloat(getComputedStyle(document.querySelector('.sv-tok')).fontSize)")) < size


@pytest.fixture(scope="module")
def tree_trace(tiny_dirs, tiny_pair):
    config = tiny_config(tiny_dirs, drafter="tree", rule="sample", branching=2, tree_depth=2, max_new_tokens=12, seed=2)
    return speculative_decode(config, prompt_ids=PROMPT, pair=tiny_pair)


def test_tree_rounds_step_in_the_browser_with_their_tree_picture(tree_trace, offline_browser, tmp_path):
    context, refused = offline_browser
    path = write_lesson(tmp_path / "tree.html", tree_trace)
    page = open_lesson(context, path)
    count = len(tree_trace.rounds)
    for index, rnd in enumerate(tree_trace.rounds, start=1):
        assert round_title(page) == f"Round {index} of {count}"
        assert page.locator("#seed svg.sv-tree circle").count() == len(rnd.tree.nodes)
        assert page.locator("#seed h4").all_inner_texts()[2] == "Recursive rejection sampling"
        assert page.locator(".card").count() == len(rnd.draft) + 1  # each sibling check, then the correction or bonus
        page.keyboard.press("ArrowRight")
    assert refused == []


def test_a_round_downloads_as_svg_and_png(sampled_trace, tree_trace, offline_browser, tmp_path):
    context, _ = offline_browser
    for name, trace in (("chain", sampled_trace), ("tree", tree_trace)):
        path = write_lesson(tmp_path / f"{name}.html", trace)
        page = open_lesson(context, path, "#round=2")
        with page.expect_download() as svg:
            page.locator("#svg").click()
        picture = svg.value.path().read_text(encoding="utf-8")
        assert svg.value.suggested_filename == "specviz-round-2.svg" and picture.startswith("<svg")
        assert ("<circle" in picture) == (name == "tree")  # a tree round exports its tree
        with page.expect_download() as png:
            page.locator("#png").click()
        data = png.value.path().read_bytes()
        assert png.value.suggested_filename == "specviz-round-2.png" and data[:8] == b"\x89PNG\r\n\x1a\n"
        width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
        shown = page.evaluate(
            "(() => { const d = new DOMParser().parseFromString(roundSvg(), 'image/svg+xml')"
            ".documentElement; return [+d.getAttribute('width'), +d.getAttribute('height')]; })()"
        )
        assert (width, height) == (2 * shown[0], 2 * shown[1])  # rasterised at twice the picture's size


def test_the_lesson_file_cannot_be_broken_out_of(sampled_trace):
    hostile = sampled_trace.without_timings()
    hostile.prompt_text = "</script><script>alert(1)</script>"
    hostile.rounds[0].draft[0].text = "</script><img src=x onerror=alert(2)>"  # a token text reaches the drawings too
    page = lesson_html(hostile, title="<b>class</b>")
    assert "</script><script>alert(1)" not in page and "<b>class</b>" not in page and "<img src=x" not in page
    assert json.loads(embedded_json(hostile))["prompt_text"] == hostile.prompt_text
    with pytest.raises(ValueError, match="view"):
        lesson_html(hostile, view="cinema")


def test_cli_writes_the_standalone_lesson(tiny_dirs, tmp_path):
    out = tmp_path / "cli.html"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "specviz",
            "html",
            "--target",
            tiny_dirs["target"],
            "--draft",
            tiny_dirs["draft"],
            "--prompt-ids",
            ",".join(map(str, PROMPT)),
            "--max-new-tokens",
            "8",
            "--device",
            "cpu",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    text = out.read_text(encoding="utf-8")
    data = json.loads(text.split('<script id="trace-data" type="application/json">')[1].split("</script>")[0])
    assert len(data["output_ids"]) == 8
    assert not re.search(r"<(script|link|img)[^>]+(src|href)=", text)  # every script and style is inline
    assert 'data-race="data"' in text and "target passes" in text  # its speed slide (the race) and its summary


def test_the_cli_lesson_is_the_apps_default_lesson(embedded, tmp_path):
    """No prompt: the app's default prompt, with the pair's measured defaults (as the app opens it)."""
    out = tmp_path / "default.html"
    command = [sys.executable, "-m", "specviz", "html", "--max-new-tokens", "6", "--device", "cpu", "--no-race"]
    done = subprocess.run([*command, "--out", str(out)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    text = out.read_text(encoding="utf-8")
    data = json.loads(text.split('<script id="trace-data" type="application/json">')[1].split("</script>")[0])
    assert data["prompt_text"] == DEFAULT_PROMPT  # (its settings follow with_pair_defaults: tests/test_app.py)
    assert 'data-race="data"' not in text


BAR_MEASURES = """() => [...document.querySelectorAll('#cards svg.pq')].map((svg) => {
  const width = (el) => el ? el.getBoundingClientRect().width : 0;
  const rows = [...svg.querySelectorAll('g.row')].map((g) => {
    const p = g.querySelector('rect.p-bar'), q = g.querySelector('rect.q-extent') || g.querySelector('rect.q-bar');
    return {p: p ? Number(p.dataset.p) : null, q: q ? Number(g.querySelector('rect.q-bar').dataset.q) : null,
            pw: width(p), qw: width(q)};
  });
  return {track: width(svg.querySelector('rect.track')), rows};
})"""


def test_every_card_draws_its_bars_on_its_own_scale_in_chromium(sampled_trace, offline_browser, tmp_path):
    """The p-vs-q comparison, measured on the drawn bars of a sampling trace at 1440x900: each card's largest bar
    spans most of its track, and where p < q the p-bar is shorter than the q-bar by the ratio p/q."""
    page = open_lesson(offline_browser[0], write_lesson(tmp_path / "lesson.html", sampled_trace))
    page.set_viewport_size({"width": 1440, "height": 900})
    cards = compared = 0
    for index in range(1, len(sampled_trace.rounds) + 1):
        page.evaluate(f"() => go({index})")
        assert round_title(page) == f"Round {index} of {len(sampled_trace.rounds)}"
        for card in page.evaluate(BAR_MEASURES):
            cards += 1
            assert card["track"] >= 200  # wide enough to read at a card's largest probability
            assert max(max(r["pw"], r["qw"]) for r in card["rows"]) >= 0.6 * card["track"]
            for row in card["rows"]:
                if row["p"] is None or row["q"] is None or row["p"] >= row["q"] or row["pw"] < 2:
                    continue
                compared += 1
                assert row["pw"] < row["qw"]
                assert row["pw"] / row["qw"] == pytest.approx(row["p"] / row["q"], rel=0.05)
    page.close()
    assert cards >= 2 * len(sampled_trace.rounds) and compared > 0  # every round has cards; some tokens had p < q


@pytest.mark.parametrize("rule", ["greedy", "sample", "topbeta"])
def test_the_labels_are_the_rules_own(tiny_dirs, tiny_pair, rule):
    """The correction and the bonus are named as the rule makes them (greedy resamples nothing), and the formula and
    the way a test is drawn are the rule's registry entry's, with the run's own settings."""
    trace = speculative_decode(
        tiny_config(tiny_dirs, rule=rule, gamma=3, max_new_tokens=12), prompt_ids=PROMPT, pair=tiny_pair
    )
    page, spec = lesson_html(trace), rule_entry(rule)
    labels = json.loads(re.search(r'<script id="labels" type="application/json">(.*?)</script>', page).group(1))
    formula = spec.formula.format(**trace.config.flat())
    assert labels == {"correction": spec.correction, "bonus": spec.bonus, "formula": formula, "test": spec.test}
    assert ("β = 3 best" in formula) == (rule == "topbeta") and len({"draw", "argmax", "candidates"} - {spec.test}) == 2
    assert spec.correction in page and spec.bonus in page  # the legend
    assert ("resampled" in page) == (rule == "sample") and ("residual max(0, p − q)" in page) == (rule == "sample")


def test_a_correction_drawn_from_the_residuals_tail_says_so_in_readable_numbers(
    tiny_dirs, tiny_pair, offline_browser, tmp_path
):
    """A residual correction whose token is not among the card's bars (seen in class as "probability 0.0000"): the
    card says the token came from the residual's tail and how much mass the tail holds; a tiny probability is
    written as a power of ten, not rounded to zero."""

    def tail_corrections(trace):
        return [
            (i, r)
            for i, r in enumerate(trace.rounds, start=1)
            if r.correction
            and r.correction.residual_top
            and r.correction.token_id not in r.correction.residual_top.ids[:8]
        ]

    config = tiny_config(tiny_dirs, rule="sample", temperature=3.0, gamma=4, max_new_tokens=24)
    found = next(
        (
            (trace, hits[0])
            for seed in range(60)
            for trace in [speculative_decode(config.replace(seed=seed), prompt_ids=PROMPT, pair=tiny_pair)]
            for hits in [tail_corrections(trace)]
            if hits
        ),
        None,
    )
    assert found is not None  # at T = 3 over 32 tokens the residual's tail is often drawn
    trace, (at, rnd) = found
    context, _ = offline_browser
    page = open_lesson(context, write_lesson(tmp_path / "tail.html", trace), f"#round={at}")
    cards = page.locator("#cards").inner_text()
    tail = 1 - sum(rnd.correction.residual_top.probs[:8])
    assert "is not among the bars" in cards and page.evaluate(f"fmt({tail})") in cards
    assert page.evaluate("fmt(0.000031)") == "3.1e-5" and page.evaluate("fmt(0.0042)") == "0.0042"
    assert page.evaluate("fmt(0.00014) + '/' + fmt(0.00028)") == "0.00014/0.00028"  # reads as the ratio it is
    assert page.evaluate("apart(0.9658, 0.9701)") == ["0.966", "0.970"]  # a near tie with enough decimals
    for text in ("\n", "  ", " the", "a\tb", "\x01"):  # a token reads the same in the player as in the app's rows
        assert page.evaluate(f"show({text!r})") == html.escape(display_text(text), quote=False), repr(text)


FITS = r"""() => [...document.querySelectorAll('#cards svg.pq')].map((svg) => {
  const width = svg.viewBox.baseVal.width, texts = [...svg.querySelectorAll('text')];
  return [Math.max(...texts.map((t) => t.getBBox().x + t.getBBox().width)) <= width + 0.5,
          texts.some((t) => /(^|\s)[pq] < /.test(t.textContent) && !t.classList.contains('below-note')),
          !!svg.querySelector('.below-note')];
})"""


def test_every_cards_text_fits_its_chart_and_a_bound_is_explained(tiny_dirs, tiny_pair, offline_browser, tmp_path):
    """Marks such as "← argmax, drafted" are never cut off at the chart's edge, and a "q < x" (a token outside the
    model's recorded top list) always comes with the note that says what it means."""
    context, _ = offline_browser
    trace = speculative_decode(
        tiny_config(tiny_dirs, rule="greedy", gamma=4, max_new_tokens=16, top_n=3), prompt_ids=PROMPT, pair=tiny_pair
    )
    page = open_lesson(context, write_lesson(tmp_path / "greedy.html", trace))
    seen = []
    for index in range(len(trace.rounds)):
        for fits, bounded, noted in page.evaluate(FITS):
            assert fits, index
            assert bounded == noted, index
            seen.append(bounded)
        page.keyboard.press("ArrowRight")
    assert any(seen)  # with 3 recorded top tokens some card has a bound to explain


PROJECTOR = """() => {
  const rows = [...document.querySelectorAll('#seed .sv-row')];
  const draft = rows.find((row) => row.querySelector('.sv-label').textContent === 'Draft');
  const drafted = [...draft.querySelectorAll('.sv-tok')].filter((t) => t.title.startsWith('q='));  // not the context
  const seed = document.getElementById('seed').getBoundingClientRect();  // the rows' frame, which clips what overflows
  const visible = drafted.filter((t) => { const b = t.getBoundingClientRect();
    return b.width > 0 && b.left >= seed.left && b.right <= Math.min(seed.right, window.innerWidth)
      && b.bottom <= window.innerHeight; });
  const shown = [...document.querySelectorAll('#cards .card')].filter((c) => getComputedStyle(c).display !== 'none');
  const test = shown[0].querySelector('.test');
  // the px a text is drawn at: an SVG text at its size times the SVG's drawn scale, the rest times the fit's zoom
  const drawn = (e) => { const svg = e.closest('svg'), px = parseFloat(getComputedStyle(e).fontSize) || 0;
    return svg ? px * svg.getBoundingClientRect().width / svg.viewBox.baseVal.width : px * e.currentCSSZoom; };
  const texts = [...shown[0].querySelectorAll('*')]
    .filter((e) => e.children.length === 0 && e.textContent.trim() && e.getClientRects().length);
  return {drafted: drafted.length, visible: visible.length, cards: shown.length,
          testOnScreen: test.getBoundingClientRect().bottom <= window.innerHeight,
          testPx: drawn(test), hint: shown[0].querySelector('.card-hint').textContent,
          largest: Math.max(...texts.map(drawn)), smallest: Math.min(...texts.map(drawn))};
}"""


@pytest.fixture(scope="module")
def projector_trace(embedded):
    """The embedded pair at γ = 8 on a code prompt: eight drafted tokens a round, the widest rows a profile picks."""
    from specviz.config import DecodeConfig
    from specviz.engine import load_pair

    config = DecodeConfig(device="cpu", gamma=8, max_new_tokens=12)
    return speculative_decode(
        config, prompt="Write a Python function that returns the n-th Fibonacci number.", pair=load_pair(config)
    )


def projected(context, path):
    """The lesson at ``path`` in its Present view on a 1280x720 screen, once drawn and fitted."""
    page = context.new_page()
    page.set_viewport_size({"width": 1280, "height": 720})
    page.set_default_timeout(600_000)
    page.goto(path.as_uri() + "#round=1&view=present")
    page.wait_for_selector("#seed .sv-rows")
    return page


def test_the_projector_view_fits_a_1280x720_screen(projector_trace, offline_browser, tmp_path):
    """The teacher's projector (#37, #45): at 1280x720 the Present view shows every drafted token of the round (the
    chat template's tokens no longer take the width), one card at a time stepped with ↑/↓, its acceptance test on the
    screen, at least 20 px and the largest text of the card, and no text of the card under 16 px."""
    trace = projector_trace
    page = projected(offline_browser[0], write_lesson(tmp_path / "projector.html", trace))
    seen = page.evaluate(PROJECTOR)
    assert seen["drafted"] == len(trace.rounds[0].draft) == seen["visible"]  # every drafted token, on screen
    assert seen["cards"] == 1 and seen["hint"].startswith("card 1 of")
    assert seen["testPx"] >= 20 and seen["testPx"] == seen["largest"] and seen["testOnScreen"]
    assert seen["smallest"] >= 16  # every text of the card readable from the back of the room (the chart's too)
    page.keyboard.press("ArrowDown")
    assert page.evaluate(PROJECTOR)["hint"].startswith("card 2 of")
    page.screenshot(path=str(ARTIFACTS / "projector.png"))


def test_the_projector_view_shrinks_to_fit_long_tokens(projector_trace, offline_browser, tmp_path):
    """A vocabulary of long tokens (a code model's identifiers and indentation runs): the same round with each of
    its eight drafted tokens 14 characters long is wider than the screen at full size, so the view shrinks until
    every drafted token and the card's test are on the 1280x720 screen, its test still in large type."""
    trace = copy.deepcopy(projector_trace)
    for position in trace.rounds[0].draft:
        position.text = f"_{position.text.strip()}_identifier"[:14].ljust(14, "_")
    page = projected(offline_browser[0], write_lesson(tmp_path / "long.html", trace))
    seen = page.evaluate(PROJECTOR)
    zoom = page.evaluate("document.querySelector('main').currentCSSZoom")
    assert zoom < 1, zoom  # at full size it did not fit
    assert seen["drafted"] == len(trace.rounds[0].draft) == seen["visible"], (seen, zoom)
    assert seen["testOnScreen"] and seen["testPx"] >= 16, (seen, zoom)
    page.screenshot(path=str(ARTIFACTS / "projector-long-tokens.png"))


def test_a_greedy_quiz_question_does_not_mark_the_argmax_before_the_answer(
    tiny_dirs, tiny_pair, offline_browser, tmp_path
):
    """Under greedy the "← argmax" mark is the verdict: the quiz shows the bars to predict from, and the mark after."""
    trace = speculative_decode(
        tiny_config(tiny_dirs, rule="greedy", gamma=3, max_new_tokens=8), prompt_ids=PROMPT, pair=tiny_pair
    )
    context, _ = offline_browser
    page = open_lesson(context, write_lesson(tmp_path / "greedy-quiz.html", trace, view="quiz"), "#round=1&view=quiz")
    assert "argmax" not in page.locator("#cards").inner_text() and "drafted" in page.locator("#cards").inner_text()
    for position in trace.rounds[0].draft:
        assert "argmax" not in page.locator("#cards").inner_text()  # while any of the round's questions waits
        page.locator(f'button[data-quiz="1:{position.index}"][data-guess="{position.status}"]').click()
    assert "argmax" in page.locator("#cards").inner_text()  # answered: the verdict's marks are back
