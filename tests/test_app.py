"""The app through streamlit's AppTest, with tiny real models injected at the loader boundary (URL ids)."""

from __future__ import annotations

import json
import logging
import re
import urllib.parse
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from specviz.serving.pairs import MACHINE_DEFAULTS, app_defaults, app_device
from specviz.ui.state import Session

pytestmark = [pytest.mark.slow]  # it runs the app (or loads the embedded pair): the whole suite's lane

APP = str(
    Path(__file__).resolve().parent.parent / "app.py"
)  # the checkout's main script, as `streamlit run app.py` starts it


def make_app(params: dict[str, str]) -> AppTest:
    # Each run's work is bounded (tiny models, or a few tokens of the embedded one); the generous timeout
    # only keeps a busy 2-core machine from failing a run that is merely slow. This machine's defaults are measured
    # first (once; then read from the cache), as on a server that has run once: a fresh server measures them in the
    # background, and a test's expectations would move under it.
    MACHINE_DEFAULTS.get(app_device())
    at = AppTest.from_file(APP, default_timeout=1800)
    for key, value in params.items():
        at.query_params[key] = value
    return at


def html_of(at: AppTest) -> str:
    return "\n".join(m.value for m in at.markdown)


def embedded_json(page: str, name: str):
    return json.loads(page.split(f'<script id="{name}" type="application/json">')[1].split("</script>")[0])


def player_of(at: AppTest) -> tuple[dict, list[dict], dict]:
    """The lesson player a page embeds: (its trace, each round's seed drawing, the round and view it opens on)."""
    page = at.get("iframe")[0].proto.srcdoc
    return embedded_json(page, "trace-data"), embedded_json(page, "drawings"), embedded_json(page, "start")


def students_links(at: AppTest) -> list[str]:
    """The quiz links the teacher's sidebar shows (its "Copy link for students (quiz)": a box the player rewrites)."""
    boxes = [e.proto for e in at.get("bidi_component") if e.proto.component_name == "specviz_students_link"]
    return [json.loads(box.json)["link"] for box in boxes]


def test_round_view_sends_every_round_to_the_browser_once(tiny_params):
    at = make_app(tiny_params).run()
    assert not at.exception and not at.error
    assert "rounds" in html_of(at) and "target passes" in html_of(at)
    trace, drawings, start = player_of(at)
    stats = trace["stats"]  # counts, not a rate that reads like alpha (unverified drafts are in the denominator)
    assert f"**{stats['accepted_tokens']}/{stats['drafted_tokens']}** drafted tokens accepted" in html_of(at)
    assert len(drawings) == len(trace["rounds"]) >= 2  # every round is in the page: stepping needs no server
    for row in ("Decoder input", "Draft", "Verify", "Output", "Next input", "[MASK]"):
        assert row in drawings[0]["rows"]
    assert any("✓" in d["rows"] or "✗" in d["rows"] for d in drawings)
    assert start == {"view": "step", "round": 1, "answered": 0}  # the player keeps the page's link on its round
    last = len(trace["rounds"])
    linked = make_app({**tiny_params, "round": str(last)}).run()
    assert player_of(linked)[2]["round"] == last and linked.query_params["round"] == str(last)
    beyond = make_app({**tiny_params, "round": "999"}).run()
    assert player_of(beyond)[2]["round"] == last and beyond.query_params["round"] == str(last)


def test_a_shared_link_reopens_the_same_configuration(tiny_params):
    """A link with rule and gamma in it (what a teacher shares) opens exactly that trace.

    Editing sidebar widgets is exercised in the real-browser test: AppTest does not re-run the
    entry point's sidebar of an st.navigation app on its reruns.
    """
    gamma = 5 if app_defaults().gamma != 5 else 6  # not the app's own default, so the link must carry it
    at = make_app({**tiny_params, "rule": "sample", "gamma": str(gamma), "seed": "3", "round": "2"}).run()
    assert not at.exception and not at.error
    trace, _, start = player_of(at)
    assert start["round"] == 2 and trace["config"]["rule"] == "sample" and trace["config"]["gamma"] == gamma
    assert at.query_params["rule"] == "sample" and at.query_params["gamma"] == str(gamma)
    assert at.query_params["seed"] == "3"
    verified = [p for r in trace["rounds"] for p in r["draft"] if p["status"] != "not_verified"]
    assert verified and all(p["uniform"] is not None for p in verified)  # the uniform draw of every verified token
    again = make_app(dict(at.query_params)).run()  # a second person opening the link the first one's page wrote
    assert player_of(again)[0]["output_ids"] == trace["output_ids"]
    assert [m.value for m in again.markdown] == [m.value for m in at.markdown]


def test_bad_url_values_fall_back_with_a_message(tiny_params):
    at = make_app({**tiny_params, "gamma": "99", "top_p": "abc", "rule": "nonsense", "round": "-3"}).run()
    assert not at.exception and not at.error
    warnings = " ".join(w.value for w in at.warning)
    assert "gamma" in warnings and "top_p" in warnings and "rule" in warnings and "round" in warnings
    assert at.slider(key="gamma").value == app_defaults().gamma  # the app's default, this machine's best


@pytest.mark.parametrize(
    "change,message",
    [
        ({"target": "no-such-org/no-such-model"}, "no-such-org/no-such-model' is not a model directory here"),
        ({"prompt": "   "}, "prompt is empty"),
    ],
)
def test_bad_input_shows_an_error_not_a_traceback(tiny_params, change, message):
    at = make_app({**tiny_params, **change}).run()
    assert not at.exception
    assert any(message in e.value for e in at.error)


def test_a_missing_draft_model_is_explained(tiny_params):
    at = make_app({**tiny_params, "draft": ""}).run()
    assert not at.exception
    assert any("needs a draft model" in w.value for w in at.warning)


def test_tokenizer_mismatch_is_explained(tiny_params, tiny_dirs):
    at = make_app({**tiny_params, "draft": tiny_dirs["other_vocab"]}).run()
    assert not at.exception
    assert any("different tokenizers" in e.value for e in at.error)


def computations_logged(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The shared pool's "computed <label> <key digest> ..." lines so far (one per computation it ran)."""
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith("computed ")]


def test_traces_are_cached_across_sessions(tiny_params, caplog):
    caplog.set_level(logging.INFO, logger="specviz.serving.sharedwork")
    first = make_app(tiny_params).run()
    assert not first.exception and player_of(first)[0]["rounds"]
    computed = computations_logged(caplog)
    second = make_app(tiny_params).run()  # another session, same link
    assert not second.exception and player_of(second)[0]["rounds"]
    assert computations_logged(caplog) == computed


def test_the_pair_menu_says_what_each_pair_needs_here():
    """Offline (as here): the embedded pair runs, the published pair runs once fetched, a hub pair needs the hub; a
    hub pair picked anyway fails with a sentence that names the next step, not the hub client's exception."""
    from specviz.models.published import PUBLISHED, fetched
    from specviz.ui.presets import EMBEDDED_PAIR, PAIR_PRESETS, QWEN_CODER_PAIR, pair_option

    assert pair_option(EMBEDDED_PAIR).startswith("✓ ")
    assert pair_option(QWEN_CODER_PAIR).startswith("✓ " if fetched(PUBLISHED["qwen-coder-1.5b"]) else "⤓ ")
    hub_label = next(label for label, pair in PAIR_PRESETS.items() if pair and pair[0].startswith("HuggingFaceTB/"))
    assert pair_option(hub_label).startswith("☁ ")
    at = make_app({"target": PAIR_PRESETS[hub_label][0], "draft": PAIR_PRESETS[hub_label][1], "prompt": "Hi"}).run()
    assert not at.exception
    errors = " ".join(e.value for e in at.error)
    assert "cannot reach" in errors and "Next step" in errors and "OSError" not in errors
    assert ("specviz fetch" in errors) != fetched(PUBLISHED["qwen-coder-1.5b"])  # named only while not fetched
    assert any("✓ runs here · ⤓ fetch once · ☁ needs a model hub" in c.value for c in at.sidebar.caption)


def test_a_link_setting_what_the_chosen_rule_does_not_read_says_so(tiny_params):
    at = make_app({**tiny_params, "rule": "greedy", "temperature": "5", "gamma": "4"}).run()
    assert not at.exception
    warnings = [w.value for w in at.warning]
    assert any(w.startswith("temperature=5 in the link is not used by the greedy rule") for w in warnings)
    assert not any(w.startswith("gamma=") for w in warnings)  # γ is read: no message
    assert at.session_state.temperature == 5.0  # kept for when a sampling rule is chosen


HUB_PAIR = "SmolLM2 135M → 360M"  # a pair that cannot load here: its page fails at once, its sidebar still works


def test_a_link_to_a_pair_opens_on_its_own_measured_precision_unless_it_sets_one(monkeypatch, tmp_path):
    from specviz.analysis.defaults import store_defaults
    from specviz.analysis.replay import MeasuredDefaults
    from specviz.config import DecodeConfig
    from specviz.serving.pairs import app_defaults
    from specviz.ui.presets import PAIR_PRESETS
    from specviz.ui.views import pair_defaults_text

    monkeypatch.setattr("specviz.analysis.defaults.cache_root", lambda: tmp_path)  # the pairs' defaults only
    monkeypatch.setattr("specviz.models.hub.hub_reachable", lambda: False)  # the hub pair fails at once
    app = app_defaults()
    target, draft = PAIR_PRESETS[HUB_PAIR]
    hub = DecodeConfig(target=target, draft=draft, device=app.device)
    assert "has not been measured on this machine yet" in pair_defaults_text(hub)  # and how to measure it
    other, gamma = ("bfloat16" if app.dtype == "float32" else "float32"), (7 if app.gamma != 7 else 6)
    store_defaults(hub.target, hub.draft, app.device, MeasuredDefaults(other, gamma, "measured here"))
    assert "This pair's default precision here: " + other in pair_defaults_text(hub)
    # a link to the pair opens on its measured defaults; a link that sets the precision keeps it
    at = make_app({"target": hub.target, "draft": hub.draft, "prompt": "Hi"}).run()
    assert not at.exception and (at.session_state.dtype, at.session_state.gamma) == (other, gamma)
    at = make_app({"target": hub.target, "draft": hub.draft, "dtype": app.dtype, "prompt": "Hi"}).run()
    assert (at.session_state.dtype, at.session_state.gamma) == (app.dtype, gamma)
    # the precision is the link's: a pair change keeps it (the draft's precision follows the pair: not measured here)
    assert at.session_state[Session.pair_defaults.key] == {"gamma": gamma, "draft_dtype": None, "confidence_exit": 0}


def test_a_pair_change_moves_the_settings_that_still_hold_the_last_pairs_defaults():
    from specviz.analysis.defaults import follow_pair
    from specviz.analysis.replay import MeasuredDefaults

    applied = {"dtype": "float32", "gamma": 3}
    moved = follow_pair({"dtype": "float32", "gamma": 3}, applied, MeasuredDefaults("bfloat16", 6, ""))
    assert moved == ({"dtype": "bfloat16", "gamma": 6}, {"dtype": "bfloat16", "gamma": 6})
    # the user set γ 5: it stays, and stays the user's when the pair changes again
    values, now = follow_pair({"dtype": "float32", "gamma": 5}, applied, MeasuredDefaults("bfloat16", 6, ""))
    assert values == {"dtype": "bfloat16", "gamma": 5}
    assert follow_pair(values, now, MeasuredDefaults("float32", 2, ""))[0] == {"dtype": "float32", "gamma": 5}
    # a pair not measured here changes nothing; a setting the link pinned is never moved
    assert follow_pair({"dtype": "float32", "gamma": 3}, applied, None) == ({"dtype": "float32", "gamma": 3}, applied)
    assert follow_pair({"dtype": "float32", "gamma": 3}, {"gamma": 3}, MeasuredDefaults("bfloat16", 6, ""))[0] == {
        "dtype": "float32",
        "gamma": 6,
    }


@pytest.mark.parametrize("page", [None, "round_view", "metrics", "race"])
def test_a_quiz_link_on_any_page_opens_the_quiz_at_its_round_with_no_verdict(tiny_params, page):
    at = make_app({**tiny_params, "view": "quiz", "round": "2"})
    if page:
        at.switch_page(f"pages/{page}.py")
    at.run()
    assert not at.exception, at.exception
    trace, _, start = player_of(at)
    assert start == {"view": "quiz", "round": 2, "answered": 0}  # opens in its quiz: verdicts wait for answers
    assert at.query_params["view"] == "quiz" and at.query_params["prompt"] == tiny_params["prompt"]
    assert len(at.get("iframe")) == 1 and not any("drafted tokens accepted" in m.value for m in at.markdown)


def test_the_students_link_round_trips_to_the_quiz(tiny_params):
    from specviz.serving.pairs import app_defaults

    gamma = 3 if app_defaults().gamma == 2 else 2  # not the app's own: the link carries what differs from it
    at = make_app({**tiny_params, "gamma": str(gamma)}).run()
    (link,) = students_links(at)
    query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(link).query))
    assert urllib.parse.urlsplit(link).path.endswith("lesson_player") and query["gamma"] == str(gamma)
    assert query["view"] == "quiz" and query["round"] == "1"  # the round is named, the first one too
    opened = make_app(query).run()
    assert player_of(opened)[2]["view"] == "quiz" and player_of(opened)[0]["config"]["gamma"] == gamma


def test_a_drafter_without_weights_for_the_pair_says_why_in_the_sidebar(tiny_params):
    at = make_app({**tiny_params, "drafter": "eagle"}).run()
    assert any("trained on the embedded SmolLM2-135M target only" in w.value for w in at.sidebar.warning)
    fine = make_app(tiny_params).run()
    assert not any("target only" in w.value for w in fine.sidebar.warning)


def test_the_cli_lesson_takes_the_pairs_measured_defaults_where_the_user_gave_none(monkeypatch):
    from specviz.analysis.replay import MeasuredDefaults
    from specviz.config import DecodeConfig
    from specviz.serving import pairs

    measured = MeasuredDefaults("bfloat16", 6, "measured here", draft_dtype="int8")
    monkeypatch.setattr(pairs, "pair_defaults", lambda target, draft, device: measured)
    chosen = pairs.with_pair_defaults(DecodeConfig(device="cpu"))
    assert (chosen.dtype, chosen.gamma, chosen.draft_dtype) == ("bfloat16", 6, "int8")
    given = pairs.with_pair_defaults(DecodeConfig(device="cpu", gamma=3))  # a value the user gave is kept
    assert (given.dtype, given.gamma) == ("bfloat16", 3)
    monkeypatch.setattr(pairs, "pair_defaults", lambda target, draft, device: None)  # not measured here
    assert pairs.with_pair_defaults(DecodeConfig(device="cpu")) == DecodeConfig(device="cpu")


def test_a_server_set_to_a_quantised_precision_opens_each_pair_on_its_fastest_draft_there(monkeypatch, tmp_path):
    """``SPECVIZ_DTYPE=int4``: the pair opens on the draft precision, γ and confidence exit measured fastest for an
    int4 target on this machine, and says so; a precision not measured here keeps the config's own."""
    from specviz.analysis.defaults import store_defaults
    from specviz.analysis.replay import FastestDraft, MeasuredDefaults
    from specviz.config import DecodeConfig
    from specviz.serving import pairs

    monkeypatch.setattr("specviz.analysis.defaults.cache_root", lambda: tmp_path)
    fastest = {"float32": FastestDraft("int4", 5, 2.6, 9.4, 0.0), "int4": FastestDraft("int4", 6, 1.5, 23.0, 0.8)}
    store_defaults("a-target", "a-draft", "cpu", MeasuredDefaults("float32", 5, "measured", "int4", fastest))
    monkeypatch.setenv("SPECVIZ_DTYPE", "int4")
    own = pairs.pair_defaults("a-target", "a-draft", "cpu")
    assert own is not None and (own.dtype, own.gamma, own.draft_dtype, own.confidence_exit) == ("int4", 6, "int4", 0.8)
    assert "stopping below max q = 0.8" in own.reason
    monkeypatch.setattr(pairs, "pair_defaults", lambda target, draft, device: own)
    chosen = pairs.with_pair_defaults(DecodeConfig(device="cpu"))
    assert (chosen.dtype, chosen.gamma, chosen.draft_dtype, chosen.value("confidence_exit")) == ("int4", 6, "int4", 0.8)
    monkeypatch.undo()
    monkeypatch.setattr("specviz.analysis.defaults.cache_root", lambda: tmp_path)
    monkeypatch.setenv("SPECVIZ_DTYPE", "int8")  # not measured for this pair: the config's γ, at least the lesson's
    assert pairs.pair_defaults("a-target", "a-draft", "cpu") == MeasuredDefaults(
        "int8", max(pairs.LESSON_GAMMA_MIN, DecodeConfig().gamma), "$SPECVIZ_DTYPE sets int8 on this server."
    )


def test_the_packaged_main_script_serves_the_same_pages(tiny_params):
    """`specviz app` runs the package's main script, `streamlit run app.py` the checkout's: every page opens the
    same way under both (the packaged one resolves its pages inside the package)."""
    from specviz.ui.navigation import PAGES

    packaged = str(Path(__file__).resolve().parent.parent / "specviz" / "ui" / "app.py")
    for page in PAGES:
        titles = []
        for main in (APP, packaged):
            at = AppTest.from_file(main, default_timeout=1800)
            for key, value in tiny_params.items():
                at.query_params[key] = value
            at.run().switch_page(page.path).run()
            assert not at.exception, (main, page.script, at.exception)
            titles.append([t.value for t in at.title])
        assert titles[0] == titles[1] and titles[0], page.script


def test_every_costly_button_says_what_pressing_it_costs_here(tiny_params):
    """#45: before pressing, a button says how long it will take, predicted from the machine profile of the loaded
    target (serving/estimates.py): on every page that offers one."""
    from specviz.ui.navigation import PAGES

    labels = []
    for page in PAGES:
        at = make_app(tiny_params).run()
        at.switch_page(page.path).run()
        assert not at.exception, (page.script, at.exception)
        labels += [(page.script, b.label) for b in at.button]
    assert len({page for page, _ in labels}) >= 7  # the pages with costly buttons
    predicted = re.compile(r"\((about \d+ (s|min)|under a second) here(, plus .+)?\)$")
    assert [(page, label) for page, label in labels if not predicted.search(label)] == []


def test_a_flat_trees_link_carries_the_block_this_machine_measured(tiny_params):
    """Reproducibility: a flat tree's block is this machine's measured one, made once the target is loaded and then
    written into the link, so the link draws the same tree on any other machine (tests/test_tree.py builds it there)."""
    flat = {**tiny_params, "drafter": "tree", "tree_mode": "flat", "tree_depth": "2"}
    first = make_app(flat).run()  # its trace loads the pair (the run makes the choice: its trace records it)
    assert not first.exception and not first.error
    made = player_of(first)[0]["config"]["flat_block"]
    assert isinstance(made, int)
    opened = make_app(flat).run()  # the pair is loaded now: the sidebar makes the choice and the link carries it
    assert not opened.exception and not opened.error
    assert opened.query_params["flat_block"] == str(made)
    assert player_of(opened)[0]["config"]["flat_block"] == made


def test_a_fresh_start_opens_at_once_and_measures_the_machine_after_the_work_on_screen(monkeypatch):
    """No defaults stored for this machine: the first page opens on the config's defaults (nothing measured while it
    opens), the measurement waits while the sessions' work runs, then measures once; the pair then opens on its
    measured defaults, its block at least the lesson's (a measured fastest γ of 2 opens at 3)."""
    from specviz.analysis.replay import MeasuredDefaults
    from specviz.limits import EMBEDDED
    from specviz.serving import pairs
    from specviz.serving.built_once import BuiltOnce

    measured: list[str] = []

    def measure(device: str) -> MeasuredDefaults:
        measured.append(device)
        return MeasuredDefaults("float32", 2, "the fastest here")

    busy = iter([True, True, False])  # the work on screen, twice looked at, then done
    monkeypatch.setattr(pairs, "MACHINE_DEFAULTS", BuiltOnce(measure, kept=1))
    monkeypatch.setattr(pairs, "_measuring", {})
    monkeypatch.setattr(pairs, "IDLE_POLL_S", 0.01)
    device = "a-device-never-measured"  # no stored file: a fresh machine
    assert not pairs.defaults_known(device) and pairs.pair_defaults(EMBEDDED, None, device) is None
    pairs.measure_in_background(device, busy=lambda: next(busy))
    pairs.measure_in_background(device, busy=lambda: next(busy))  # asked again by another session: one thread
    pairs._measuring[device].join()
    assert measured == [device] and next(busy, "looked at until idle") == "looked at until idle"
    own = pairs.pair_defaults(EMBEDDED, None, device)
    assert pairs.defaults_known(device) and own is not None and own.gamma == pairs.LESSON_GAMMA_MIN == 3


def test_what_a_precision_pick_moved_is_said_in_one_line():
    from specviz.ui.controls import moved_settings

    before = {"dtype": "int4", "gamma": 5, "draft_dtype": None, "confidence_exit": 0.0}
    after = {"dtype": "int4", "gamma": 4, "draft_dtype": "int4", "confidence_exit": 0.9}
    assert moved_settings(before, after) == "γ 5 → 4, draft precision the target's → int4, confidence exit off → 0.9"
    assert moved_settings(before, dict(before)) == ""  # nothing moved: nothing said
