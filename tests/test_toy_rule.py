"""Adding a rule = its module + one registry line: a toy rule registered at run time (tests/toy_rule.py) runs in the
engine, the CLI, the app's sidebar and Compare rules page and the lesson player, and nothing else names it."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pytest

from specviz.cli import main
from specviz.engine import speculative_decode
from specviz.presentation.player import lesson_html
from specviz.registry.rule_settings import TopBetaSettings
from specviz.registry.rules import RULES, register, unregister
from specviz.rules.acceptance import TARGET

from .conftest import TINY_TEXT_PROMPT
from .test_app import embedded_json, make_app
from .test_engine import tiny_config
from .test_pages import press
from .toy_rule import CONFIDENCE, ENTRY


@pytest.fixture
def cautious():
    register(ENTRY)
    yield ENTRY
    unregister(ENTRY.name)


def test_the_toy_rule_keeps_the_greedy_text_and_accepts_only_confident_tokens(cautious, tiny_dirs, tiny_pair):
    config = tiny_config(tiny_dirs, rule="cautious", max_new_tokens=16)
    trace = speculative_decode(config, prompt_ids=[3, 7, 7, 5], pair=tiny_pair)
    greedy = speculative_decode(config.replace(rule="greedy"), prompt_ids=[3, 7, 7, 5], pair=tiny_pair)
    assert trace.output_ids == greedy.output_ids  # the correction is argmax p: still the target's greedy text
    checked = [p for r in trace.rounds for p in r.draft if p.status != "not_verified"]
    assert all(p.accepted == (p.token_id == p.target_top.ids[0] and p.p >= CONFIDENCE) for p in checked)
    assert {r.correction.source for r in trace.rounds if r.correction} <= {TARGET}  # as the rule declares


def test_the_toy_rule_runs_in_the_cli(cautious, tiny_dirs, capsys):
    args = ["trace", "--target", tiny_dirs["target"], "--draft", tiny_dirs["draft"], "--rule", "cautious"]
    code = main([*args, "--prompt-ids", "3,7,5", "--max-new-tokens", "6", "--device", "cpu", "--no-timings"])
    trace = json.loads(capsys.readouterr().out)
    assert code == 0 and trace["config"]["rule"] == "cautious" and len(trace["output_ids"]) == 6


@pytest.mark.slow
def test_the_toy_rule_is_offered_compared_and_played_in_the_app(cautious, tiny_params):
    at = make_app({**tiny_params, "rule": "cautious", "prompt": TINY_TEXT_PROMPT}).run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert ENTRY.label in at.radio(key="rule").options and at.session_state["sv_config"].rule == "cautious"
    at.switch_page("pages/compare_rules.py").run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    press(at, "Check this draft with every rule")  # the page computes on a press only
    assert ENTRY.label in at.get("plotly_chart")[0].proto.spec  # a row of the verdicts grid
    assert ENTRY.help in " ".join(m.value for m in at.markdown)  # the page says what it does
    at.switch_page("pages/lesson_player.py").run()
    page = at.get("iframe")[0].proto.srcdoc
    assert embedded_json(page, "labels")["formula"] == ENTRY.formula and ENTRY.correction in page


def test_the_toy_rule_plays_in_the_lesson_file(cautious, tiny_dirs, tiny_pair):
    trace = speculative_decode(tiny_config(tiny_dirs, rule="cautious"), prompt_ids=[3, 7, 7, 5], pair=tiny_pair)
    page = lesson_html(trace)
    assert ENTRY.label in page and embedded_json(page, "labels") == {
        "correction": ENTRY.correction,
        "bonus": ENTRY.bonus,
        "formula": ENTRY.formula,
        "test": "argmax",
    }


def test_unregistered_the_toy_rule_is_gone(tiny_dirs):
    assert "cautious" not in RULES
    with pytest.raises(SystemExit):
        main(["trace", "--target", tiny_dirs["target"], "--rule", "cautious", "--prompt-ids", "3,7"])


@dataclasses.dataclass(frozen=True)
class OwnSetting:
    caution: float = 0.5  # a setting no config holds


def test_a_rule_whose_name_is_taken_or_whose_settings_no_config_holds_is_refused(cautious):
    with pytest.raises(ValueError, match="registered already"):
        register(ENTRY)
    with pytest.raises(ValueError, match="no config's"):
        register(dataclasses.replace(ENTRY, name="own", settings=OwnSetting))
    register(dataclasses.replace(ENTRY, name="reads-beta", settings=TopBetaSettings))  # a group the config holds
    try:
        assert RULES["reads-beta"].fields == ("beta", "tau")
    finally:
        unregister("reads-beta")


def test_the_rule_registry_and_the_config_read_without_torch():
    code = "import sys, specviz.registry.rules, specviz.config; print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"  # rule modules are imported on first use, by their entry's build
