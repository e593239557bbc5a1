"""Every teaching page through AppTest, on the tiny real pair injected via the URL (the loader boundary)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from specviz import ui
from specviz.analysis import metrics
from specviz.analysis.rules import NEVER
from specviz.config import DecodeConfig
from specviz.engine import speculative_decode
from specviz.registry.drafters import DRAFTERS
from specviz.serving.pairs import app_defaults
from specviz.ui.state import page_key

from .test_app import make_app, player_of

pytestmark = [pytest.mark.slow]


@pytest.fixture
def quiet_profiles(monkeypatch):
    """The tiny pair's profiles count as quiet here (its sub-millisecond passes are never quiet on a shared machine:
    the pages would rightly predict nothing from them)."""
    from specviz.models.profile import PassProfile

    monkeypatch.setattr(PassProfile, "quiet", True)


@pytest.fixture
def params(tiny_dirs) -> dict[str, str]:
    return {
        "target": tiny_dirs["target"],
        "draft": tiny_dirs["draft"],
        "drafter": "model",
        "prompt": "w3 w7 w5 w9 w3 w7",
        "max_new_tokens": "16",
        "gamma": "3",
        "draft_dtype": "float32",  # the draft these tests recompute with (the pair's measured default may be int4)
    }


def open_page(params, page: str):
    at = make_app(params).run()
    at.switch_page(f"pages/{page}.py").run()
    assert not at.exception, at.exception
    return at


def test_metrics_page(params, tiny_dirs, tiny_pair, quiet_profiles):
    at = open_page(params, "metrics")
    assert not at.error, [e.value for e in at.error]
    assert any(i.value.startswith("**Speedup of this configuration: ") for i in at.info)  # the one headline
    next(b for b in at.button if b.label.startswith("Time both decoders")).click().run()
    assert any(b.label.startswith("Measure again: live timing") for b in at.button)
    values = {m.label: m.value for m in at.metric}
    config = DecodeConfig(
        target=tiny_dirs["target"], draft=tiny_dirs["draft"], drafter="model", max_new_tokens=16, gamma=3, device="cpu"
    )
    trace = speculative_decode(config, prompt=params["prompt"], pair=tiny_pair)  # the page's trace, recomputed
    check = metrics.theory_check(trace)
    assert values["α (greedy)"] == f"{trace.stats.alpha_estimate:.3f}"
    assert values["tokens per round"] == f"{trace.stats.mean_tokens_per_round:.2f}"
    assert values["tokens/round, Eq. 1"] == f"{check.expected_tokens_per_round:.2f}"
    assert values["acceptance length"] == f"{trace.stats.mean_acceptance_length:.2f}"
    assert max(len(label) for label in values) <= 24  # fits a sixth of the page at 1280 px: no label cut off
    assert values["target passes"] == str(trace.stats.target_forward_passes)
    assert {"timed ratio", "theory, v = 1", "theory, v(k) here", "cost ratio c"} <= set(
        values
    )  # named as what they are
    said = " ".join(m.value for m in at.markdown)
    assert "**The theory at this α and c**" in said and "faster than the target alone" not in said  # no 2nd headline
    reconciled = next(c.value for c in at.caption if "Acceptance length" in c.value)
    assert f"Acceptance length {trace.stats.mean_acceptance_length:.2f} = " in reconciled
    assert f"tokens per round {trace.stats.mean_tokens_per_round:.2f} = new tokens / rounds" in reconciled
    assert len(at.get("plotly_chart")) == 3  # acceptance by position, tokens per round, accepted lengths
    assert any(b.label.startswith("Download metrics") for b in at.get("download_button"))


def test_gamma_sweep_page(params):
    at = open_page(params, "gamma_sweep")
    at.multiselect[0].set_value([1, 2, 4]).run()
    at.button[0].click().run()
    assert not at.exception and not at.error
    labels = {m.label: m.value for m in at.metric}
    table = at.dataframe[0].value
    assert list(table["γ"]) == [1, 2, 4] and "theory, v(k) here" in table.columns  # named for a reader
    quiet = table[table["timing"] == "quiet"]  # a timing under load is never the best: no star, no metric
    fastest = labels["fastest γ in this sweep"]  # "2", or "2 (tied: 1, 4)"
    assert (fastest == "none quiet") if quiet.empty else (int(fastest.split()[0]) in list(quiet["γ"]))
    if not quiet.empty:  # the peak of the chart's timed line, which joins the quiet timings only
        assert quiet["timed ratio"][quiet["γ"] == int(fastest.split()[0])].iloc[0] == quiet["timed ratio"].max()
    assert float(labels["mean α (greedy)"]) == pytest.approx(table["α"].mean(), abs=5e-4)


def test_compare_rules_page(params):
    at = open_page(params, "compare_rules")
    assert not at.error
    assert len(at.get("plotly_chart")) == 0  # nothing computed on opening but the trace
    press(at, "Check this draft with every rule")  # the target's one pass over the round's draft
    assert len(at.get("plotly_chart")) == 1
    press(at, "Decode with β = 1..5")
    assert not at.exception and not at.error
    table = at.dataframe[0].value
    assert list(table["β"]) == [1, 2, 3, 4, 5] and table["departs at token"][0] == NEVER  # β = 1 is greedy
    departed = table["departs at token"][table["departs at token"] != NEVER]
    assert all(at_token.isdigit() and int(at_token) >= 1 for at_token in departed)  # whole token numbers, no "None"
    text = " ".join(m.value for m in at.markdown)
    assert "Β" not in text  # a capital beta reads as a B
    assert "tokens per round" in text and f"{len(departed)} of 5 settings depart" in text


def test_losslessness_page(params):
    at = open_page(params, "losslessness")
    assert not at.exception and not at.error and not at.metric  # nothing sampled on opening the page
    press(at, "Sample the first drafted token")  # the exact first-token test, at N = 20,000
    assert not at.exception and not at.error
    labels = [m.label.split(":")[0] for m in at.metric]
    assert labels == ["speculative sampling", "target sampling", "broken rule", "power vs broken rule"]
    assert max(len(m.label) for m in at.metric) <= 32  # fits a quarter of the page at 1280 px
    values = {m.label.split(":")[0]: m.value for m in at.metric}
    assert float(values["broken rule"]) < 0.01 and float(values["speculative sampling"]) > 0.001
    assert len(at.get("plotly_chart")) == 1
    at.slider(key=page_key("lab", "samples")).set_value(30).run()
    said = [m.value for m in at.markdown if m.value.startswith("**Power, before you press**")]
    assert len(said) == 1 and "with 30 decodes per arm" in said[0]  # the power at this very N, before the press
    at.button(key=page_key("lab", "decode")).click().run()  # later positions: real decoding, independent seeds per arm
    assert not at.exception and not at.error
    assert len(at.dataframe[0].value) == 2  # positions 1 and 2


def test_numerics_page_shows_four_outputs_and_the_preset_match_rate(params):
    at = open_page(params, "numerics")
    at.button[0].click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    outputs = at.dataframe[0].value
    assert list(outputs.precision) == ["float32", "bfloat16", "int8", "int4"]
    assert outputs["identical tokens"][0] == "16 / 16"  # float32: exact
    assert outputs["identical tokens"][2] == "16 / 16"  # int8: exact to the int8 target
    assert outputs["identical tokens"][3] == "16 / 16"  # int4: exact to the int4 target
    assert any("float32" in s.value and "token-identical" in s.value for s in at.success)
    press(at, "Decode with the draft in")  # the draft in each precision beside the target's own float32 greedy
    assert not at.exception and not at.error, [e.value for e in at.error]
    drafts = next(d.value for d in at.dataframe if "draft precision" in d.value.columns)
    assert list(drafts["draft precision"]) == ["float32", "bfloat16", "int8", "int4"]
    assert all(c > 0 for c in drafts["c (draft step / target step)"]) and all(drafts["α on this prompt"] >= 0)
    assert set(drafts["identical to the target's float32 greedy"]) == {"16 / 16"}  # the target decides
    assert any("Every draft precision" in s.value for s in at.success)
    press(at, "Measure the match rate")
    assert not at.exception and not at.error
    assert "of" in [m.value for m in at.metric if m.label.startswith("outputs identical")][0]
    assert any(len(d.value) == len(ui.PROMPT_PRESETS) and "prompt" in d.value.columns for d in at.dataframe)


def press(at, label: str) -> None:
    """Click the button whose label starts with ``label`` and run the page again."""
    next(b for b in at.button if b.label.startswith(label)).click().run()


def test_parallel_page(params):
    at = open_page(params, "parallel_verification")
    assert not at.error
    assert len(at.get("plotly_chart")) == 3  # this machine's roofline, mask, timeline: the live timing waits
    press(at, "Time the passes now")
    assert not at.exception and not at.error
    assert len(at.get("plotly_chart")) == 4  # and the arrows of the passes timed
    roofline = json.loads(at.get("plotly_chart")[1].proto.spec)
    names = [trace["name"] for trace in roofline["data"]]
    assert names == ["target, measured", "draft, measured", "target's memory bound", "target's compute bound"]
    assert len(roofline["data"][0]["x"]) == 9  # passes over 1..9 tokens, measured here
    other = "bfloat16" if params.get("dtype", app_defaults().dtype) == "float32" else "float32"
    at.toggle(key=f"sv_roofline_{other}").set_value(True).run()  # the other precision's tab, loaded on request
    assert not at.exception and not at.error and len(at.get("plotly_chart")) == 5
    second = json.loads(at.get("plotly_chart")[2].proto.spec)
    assert [t["name"] for t in second["data"]] == names and second["data"][0]["y"] != roofline["data"][0]["y"]
    assert any("Measured on this machine" in m.value for m in at.markdown)
    assert any("Measured on this machine" in c.value for c in at.caption)  # the speed sentence, from the profile
    ratio = [m.value for m in at.metric if m.label == "sequential / parallel"][0]
    assert float(ratio.rstrip("×")) > 0
    tokens = int(params["gamma"]) + 1  # the round's pass: the last accepted token and the gamma drafts
    assert {f"1 forward over {tokens} tokens", f"{tokens} one-token forwards"} <= {m.label for m in at.metric}


def test_recursive_page(params):
    at = open_page({**params, "tree_mode": "constant", "branching": "2", "tree_depth": "2"}, "recursive")
    assert not at.error, [e.value for e in at.error]
    assert not at.get("iframe")  # the sidebar's drafter is a chain: the tree's rounds wait for a press
    press(at, "Decode with the tree")
    assert not at.exception and not at.error, [e.value for e in at.error]
    trace, drawings, start = player_of(at)
    assert start["round"] == 1 and len(drawings) == len(trace["rounds"]) >= 2
    first = trace["rounds"][0]["tree"]
    # the root, 2 children, 4 grandchildren
    assert drawings[0]["rows"].count("<circle") == len(first["nodes"]) == 1 + 2 + 4
    assert "iteration 1" in drawings[0]["rows"] and "iteration 2" in drawings[0]["rows"]
    assert "<h4>The walk down the tree" in drawings[0]["rows"] and drawings[0]["svg"].startswith("<svg")  # greedy
    at.button[-1].click().run()  # run the comparison with chain drafting
    assert not at.exception and not at.error
    methods = list(at.dataframe[0].value["drafting"])
    assert methods[0] == "tree RSD-C" and methods[1].startswith("chain")


def test_round_view_shows_tree_rounds(params):
    at = make_app({**params, "drafter": "tree", "tree_depth": "2"}).run()
    assert not at.exception and not at.error
    trace, drawings, _ = player_of(at)
    assert all(d["rows"].count("<circle") == len(r["tree"]["nodes"]) for d, r in zip(drawings, trace["rounds"]))
    assert "<h4>The walk down the tree" in drawings[0]["rows"]


def test_parallel_drafters_page_on_the_embedded_model(embedded):
    at = open_page(
        {"max_new_tokens": "4", "prompt": "Explain speculative decoding in one sentence."}, "parallel_drafters"
    )
    assert not at.error, [e.value for e in at.error]
    assert len(at.get("plotly_chart")) == 2  # the two real attention patterns
    files = at.dataframe[0].value
    assert list(files.drafter) == ["blockwise", "maskquery", "eagle"] and (files.size_mb < 15).all()
    assert 0 < files.heldout_acceptance.iloc[2] <= 1  # EAGLE's manifest: its measured held-out acceptance
    at.button[-1].click().run()
    assert not at.exception and not at.error
    summary = at.dataframe[1].value
    assert list(summary.drafter)[:3] == [DRAFTERS[k].label for k in ("blockwise", "maskquery", "eagle")]
    assert "tokens per round" in summary.columns and not any("_" in column for column in summary.columns)
    calibration = at.get("plotly_chart")[-1].proto.spec
    assert "observed acceptance rate" in calibration and "calibrated" in calibration  # EAGLE-2's observation


def test_eagle_rounds_on_the_round_view_and_the_recursive_page(embedded):
    at = open_page(
        {"max_new_tokens": "8", "prompt": "Name three colours.", "drafter": "eagle", "gamma": "3"}, "round_view"
    )
    assert not at.exception and not at.error, [e.value for e in at.error]
    trace, drawings, _ = player_of(at)
    assert "Nothing drafted this round" in drawings[0]["rows"]
    assert "EAGLE drafted this round from the target" in drawings[1]["rows"]
    tree = open_page(
        {
            "max_new_tokens": "8",
            "prompt": "Name three colours.",
            "drafter": "eagle",
            "eagle_tree": "true",
            "tree_depth": "3",
            "eagle_budget": "6",
        },
        "recursive",
    )
    assert not tree.exception and not tree.error, [e.value for e in tree.error]
    trace, drawings, _ = player_of(tree)
    assert all(len(r["tree"]["nodes"]) - 1 <= 6 for r in trace["rounds"][1:] if r["tree"])
    assert any(r["tree"] for r in trace["rounds"][1:])
    tree.button[-1].click().run()  # the comparison with chain drafting
    assert list(tree.dataframe[0].value["drafting"])[0] == "EAGLE-2 dynamic tree"


@pytest.mark.parametrize("page", [p.script for p in ui.PAGES if p.script not in ("lesson_player", "parallel_drafters")])
def test_every_page_runs_on_the_embedded_default(embedded, page):
    """No hub, no injected models: the default pair, every button pressed once."""
    at = open_page({"max_new_tokens": "6", "prompt": "Name three colours."}, page)
    if page == "losslessness":
        at.slider(key=page_key("lab", "samples")).set_value(10).run()  # the smallest real-decoding run the page allows
    for _ in range(len(at.button)):
        buttons = [b for b in at.button if not b.disabled and not (b.key or "").startswith("nav_")]
        if not buttons:
            break
        buttons[-1].click().run()
        assert not at.exception
    assert not at.exception and not at.error, [e.value for e in at.error]
    drew = at.get("plotly_chart") or at.dataframe or at.metric or at.get("iframe")
    waits_for_input = {"lecture": "No computation recorded yet", "engine_report": "Nothing read yet"}
    assert drew or (page in waits_for_input and waits_for_input[page] in at.info[0].value)


def test_lesson_player_page_sends_the_whole_trace_and_keeps_the_linked_view(params):
    at = make_app({**params, "view": "quiz"})
    at.switch_page("pages/lesson_player.py").run()
    assert not at.exception and not at.error
    assert at.query_params["view"] in ("quiz", ["quiz"])  # a teacher's quiz link stays a quiz link
    trace, _, start = player_of(at)
    assert len(trace["rounds"]) >= 2 and start == {"view": "quiz", "round": 1, "answered": 0}
    present = make_app({**params, "view": "present"})
    present.switch_page("pages/lesson_player.py").run()
    assert player_of(present)[2]["view"] == "present"
    assert "[data-testid='stSidebar']" in " ".join(e.proto.body for e in present.get("html"))  # the sidebar hides
    assert not any("stSidebar" in e.proto.body for e in at.get("html"))  # only in the presenter view
    bad = make_app({**params, "view": "cinema"})
    bad.switch_page("pages/lesson_player.py").run()
    assert not bad.exception and any("view='cinema'" in w.value for w in bad.warning)


def test_a_page_run_as_the_main_script_says_how_to_start_the_app():
    page = Path(__file__).resolve().parent.parent / "specviz" / "ui" / "pages" / "gamma_sweep.py"
    at = AppTest.from_file(str(page), default_timeout=1800).run()  # no app.py to rerun through: no endless rerun
    assert not at.exception
    assert any("specviz app" in e.value for e in at.error)


def test_the_metrics_and_parallel_pages_tell_one_speed_figure(params, quiet_profiles):
    """The configuration's one headline (before a race: predicted by the quiet machine profile, and labelled so, never
    "faster") reads the same on every speed page."""
    import re

    def figure(page: str) -> str:
        at = open_page(params, page)
        story = [i.value for i in at.info if i.value.startswith("**Speedup of this configuration")]
        assert len(story) == 1, page
        assert "from this machine's quiet profile" in story[0] and "faster" not in story[0]  # its provenance
        return re.search(r"not raced yet; predicted ([0-9.]+)×", story[0]).group(1)

    assert figure("metrics") == figure("parallel_verification")


def test_a_busy_profile_predicts_nothing_and_says_what_the_load_was(params, monkeypatch):
    """Passes measured while other work held the cores: the speed pages state no prediction from them, and say why."""
    from specviz.models import profile

    monkeypatch.setattr(profile, "profile_load", lambda measured: ("other processes kept 1.8 cores busy",))
    at = open_page(params, "metrics")
    [story] = [i.value for i in at.info if i.value.startswith("**Speedup of this configuration")]
    assert "not measured yet" in story and "predicted" not in story.split("No speedup is predicted")[0]
    assert "this machine's passes were measured busy (other processes kept 1.8 cores busy)" in story
    assert not any("**The theory at this α and c**" in m.value for m in at.markdown)  # no prediction beside it


def test_the_what_if_page_compares_two_settings_on_one_prompt(params, tiny_dirs, tiny_pair):
    at = open_page(params, "what_if")
    assert not at.error, [e.value for e in at.error]
    assert not at.get("plotly_chart")  # the second run waits for a press (with its estimate)
    press(at, "Decode the second run")
    text = " ".join(m.value for m in at.markdown)
    assert "gamma 3 → 6" in text  # the second run doubles γ by default
    outputs = " ".join(h.proto.body for h in at.get("html"))  # as HTML: an indented output line is no code block
    assert "both runs write exactly this" in outputs and "sv-out" not in text
    figure = json.loads(at.get("plotly_chart")[0].proto.spec)
    assert [t["name"] for t in figure["data"]] == [
        "first run: theory at its α",
        "first run: measured",
        "second run: theory at its α",
        "second run: measured",
    ]
    config = DecodeConfig(
        target=tiny_dirs["target"], draft=tiny_dirs["draft"], drafter="model", max_new_tokens=16, gamma=6, device="cpu"
    )
    second = speculative_decode(config, prompt=params["prompt"], pair=tiny_pair)
    assert figure["data"][3]["y"] == [pytest.approx(second.stats.mean_tokens_per_round)]  # the run's own point
    assert at.slider(key=page_key("what_if", "temperature")).disabled  # greedy reads no temperature
    at.radio(key=page_key("what_if", "rule")).set_value("topbeta").run()  # a lossy rule: now the outputs may part
    press(at, "Decode the second run")  # another second run: another press
    assert not at.exception and "rule greedy → topbeta" in " ".join(m.value for m in at.markdown)
    at.radio(key=page_key("what_if", "rule")).set_value("sample").run()
    assert not at.slider(key=page_key("what_if", "temperature")).disabled
