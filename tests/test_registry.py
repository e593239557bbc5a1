"""One place per concept: the registries and the self-describing config drive the CLI, the URL, the
sidebar and the engine; the oracle drafter was added through that path alone."""

from __future__ import annotations

import dataclasses

import pytest

from specviz import ui
from specviz.cli import build_parser, config_from_args
from specviz.config import DecodeConfig, field_params
from specviz.drafters.modules import make_drafter
from specviz.engine import speculative_decode
from specviz.registry.drafters import DRAFTERS, settings_groups
from specviz.registry.rules import RULES, rule_for
from specviz.serving.urlstate import format_value, parse_query, parse_value, to_query, url_fields
from specviz.settings import ConfigError, described_fields
from specviz.ui.state import Session

from .conftest import target_greedy
from .test_app import make_app, player_of
from .test_engine import PROMPT, tiny_config


def test_every_config_field_describes_itself():
    shared = [f.name for f in dataclasses.fields(DecodeConfig) if f.name != "groups"]
    own = [name for group in settings_groups() for name in described_fields(group)]
    assert sorted(field_params()) == sorted(shared + own) and len(set(shared + own)) == len(shared + own)
    for name, described in field_params().items():
        assert described.label and described.help, name
        if described.low is not None:
            default = DecodeConfig().value(name)
            assert default is None or described.low <= default <= described.high, name
    assert set(url_fields()) == {n for n, p in field_params().items() if p.url}
    assert not {"device", "top_n", "parallel_weights"} & set(url_fields())  # the server's business, not a link's


def test_cli_options_are_generated_from_the_fields_and_the_registries():
    parser = build_parser()
    trace = next(a for a in parser._actions if a.dest == "command").choices["trace"]
    options = {a.dest: a for a in trace._actions}
    assert list(options["drafter"].choices) == list(DRAFTERS)
    assert list(options["rule"].choices) == list(RULES)
    args = parser.parse_args(
        [
            "trace",
            "--prompt",
            "hi",
            "--drafter",
            "oracle",
            "--gamma",
            "5",
            "--skip-layers",
            "1,2",
            "--no-chat-template",
            "--draft-vocab",
            "2048",
            "--tau",
            "2.5",
        ]
    )
    config = config_from_args(args)
    assert (
        config.drafter,
        config.gamma,
        config.value("skip_layers"),
        config.chat_template,
        config.draft_vocab,
        config.tau,
    ) == (
        "oracle",
        5,
        (1, 2),
        False,
        2048,
        2.5,
    )
    with pytest.raises(SystemExit):
        parser.parse_args(["trace", "--prompt", "hi", "--gamma", "five"])
    with pytest.raises(ConfigError, match="gamma"):
        config_from_args(parser.parse_args(["trace", "--prompt", "hi", "--gamma", "99"]))


def test_values_round_trip_through_text_as_url_and_cli_share_it():
    config = DecodeConfig(drafter="tree", skip_layers=(3, 4), chat_template=False, draft_vocab=0, tau=1.5, top_p=0.9)
    for name in url_fields():
        assert parse_value(name, format_value(config.value(name))) == config.value(name), name
    state = parse_query(to_query(config, "a prompt", 3, DecodeConfig()), DecodeConfig())
    assert state.config == config and state.round == 3 and not state.messages
    wide = DecodeConfig(drafter="tree", branching=8, tree_depth=2)  # valid only together (8 + 64 nodes)
    assert parse_query(to_query(wide, "p", 1, DecodeConfig()), DecodeConfig()).config == wide
    bad = parse_query({"drafter": "telepathy", "gamma": "99"}, DecodeConfig())
    assert bad.config == DecodeConfig() and len(bad.messages) == 2


def test_the_engine_builds_drafters_and_rules_from_the_registries(tiny_dirs, tiny_pair):
    for name, entry in RULES.items():
        assert type(rule_for(DecodeConfig(rule=name))).__module__ == f"specviz.rules.{entry.module}"  # its own module
    for name in ("model", "layerskip", "ngram", "oracle"):
        drafter = make_drafter(tiny_config(tiny_dirs, drafter=name), tiny_pair)
        assert hasattr(drafter, "propose"), name


@pytest.mark.parametrize("rule", ["greedy", "sample"])
def test_the_oracle_drafter_accepts_everything_and_stays_exact(tiny_dirs, tiny_pair, rule):
    config = tiny_config(tiny_dirs, drafter="oracle", rule=rule, gamma=3, max_new_tokens=17, seed=4)
    trace = speculative_decode(config, prompt_ids=PROMPT, pair=tiny_pair)
    stats = trace.stats
    assert (
        stats.drafted_tokens > 0
        and stats.acceptance_rate == 1.0
        and stats.alpha_estimate == pytest.approx(1.0, abs=1e-4)
    )  # q = p up to float rounding
    full_rounds = [r for r in trace.rounds if len(r.draft) == 3]
    assert full_rounds and all(len(r.emitted_ids) == 4 for r in full_rounds)  # gamma accepted + the bonus
    if rule == "greedy":
        assert trace.output_ids == target_greedy(tiny_pair.target, PROMPT, 17)


def test_a_none_choice_round_trips_through_its_widget():
    """Streamlit draws a None selection as an empty box, so "as shipped" (draft_vocab=None) is held as UNSET."""
    assert ui.widget_value("draft_vocab", None) == ui.UNSET and ui.config_value("draft_vocab", ui.UNSET) is None
    assert ui.config_value("draft_vocab", ui.widget_value("draft_vocab", 4096)) == 4096


@pytest.mark.slow
def test_the_sidebar_offers_every_registered_drafter_and_rule(tiny_params):
    at = make_app({**tiny_params, "drafter": "oracle"}).run()
    assert not at.exception
    assert at.radio(key="drafter").options == [spec.label for spec in DRAFTERS.values()]
    assert at.radio(key="rule").options == [spec.label for spec in RULES.values()]
    assert at.radio(key="drafter").value == "oracle"
    sliders = [w.key for w in at.slider]
    assert "gamma" in sliders and "ngram_max" not in sliders  # only the settings the chosen drafter reads
    trace, _, _ = player_of(at)
    assert trace["config"]["drafter"] == "oracle" and trace["rounds"]


def test_a_tree_reads_the_draft_head_with_a_draft_model_and_the_skipped_layers_without():
    tree = DRAFTERS["tree"]
    assert "draft_vocab" in tree.reads(True) and "skip_layers" not in tree.reads(True)
    assert "skip_layers" in tree.reads(False) and "draft_vocab" not in tree.reads(False)
    layerskip = DRAFTERS["layerskip"]  # only "if named" drafters depend on it
    assert layerskip.reads(True) == layerskip.reads(False) == layerskip.fields + layerskip.own_fields


@pytest.mark.slow
@pytest.mark.parametrize("named", [True, False])
def test_the_sidebar_enables_what_the_tree_will_read(tiny_params, named):
    params = {**tiny_params, "drafter": "tree", "tree_depth": "2", "max_new_tokens": "4"}
    if not named:
        params.pop("draft")
    at = make_app(params).run()
    assert not at.exception
    assert ("draft_vocab" in [w.key for w in at.selectbox]) is named
    assert ("skip_layers" in [w.key for w in at.text_input]) is not named


@pytest.mark.slow
def test_a_hidden_setting_keeps_its_value_until_its_drafter_is_chosen_again(tiny_params):
    """The sidebar shows the chosen drafter's and rule's settings only; a hidden one keeps its value in the session
    (and in the link), so choosing its drafter again brings it back as it was."""
    at = make_app({**tiny_params, "drafter": "model", "ngram_max": "5", "max_new_tokens": "4"}).run()
    assert not at.exception and "ngram_max" not in [w.key for w in at.slider]
    assert at.session_state["ngram_max"] == 5 and at.session_state[Session.config.key].value("ngram_max") == 5
    at.run()  # a second run (any widget change) draws no ngram_max widget again: its value must survive that
    assert at.session_state["ngram_max"] == 5 and at.query_params["ngram_max"] in ("5", ["5"])
