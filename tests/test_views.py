"""Pure view code: URL state, tables, HTML rows, the tree picture and the player's drawings, on real traces from the
tiny pair."""

from __future__ import annotations

import dataclasses
import html
import json
from xml.etree import ElementTree

import pandas as pd
import pytest
import torch

from specviz.config import DecodeConfig
from specviz.engine import speculative_decode
from specviz.presentation import boxes, player, render, tables, tree_drawing
from specviz.presentation.render import summary_line
from specviz.serving.urlstate import parse_query, parse_view, to_query

DEFAULTS = DecodeConfig()


@pytest.fixture(scope="module")
def trace(tiny_dirs, tiny_pair):
    config = DecodeConfig(
        target=tiny_dirs["target"],
        draft=tiny_dirs["draft"],
        drafter="model",
        rule="sample",
        gamma=4,
        max_new_tokens=20,
        seed=3,
        device="cpu",
    )
    return speculative_decode(config, prompt_ids=[3, 7, 5, 9], pair=tiny_pair)


def test_url_round_trip():
    config = DEFAULTS.replace(rule="topbeta", beta=4, tau=2.5, gamma=7, skip_layers=(3, 4), chat_template=False, seed=9)
    query = to_query(config, "hello & bye", 3, DEFAULTS)
    state = parse_query(query, DEFAULTS)
    assert state.config == config and state.prompt == "hello & bye" and state.round == 3 and not state.messages
    assert "device" not in query and "top_k" not in query  # defaults are left out; the device is the server's


def test_url_bad_values_fall_back_one_by_one():
    state = parse_query(
        {
            "gamma": "0",
            "beta": "x",
            "temperature": "-1",
            "top_p": "nan",
            "rule": "greedy",
            "drafter": "model",
            "target": "org/other-model",
            "round": "zero",
            "seed": "7",
        },
        DEFAULTS,
    )
    assert (state.config.gamma, state.config.beta, state.config.temperature) == (
        DEFAULTS.gamma,
        DEFAULTS.beta,
        DEFAULTS.temperature,
    )
    assert state.config.drafter == "model"  # valid: the embedded target has its shipped draft
    assert state.config.target == "embedded"  # another target without a draft model is refused
    assert state.config.seed == 7 and state.round == 1
    assert len(state.messages) == 6
    assert all("ignored" in m for m in state.messages)


def test_token_table_accounts_for_every_output_token(trace):
    table = tables.token_table(trace)
    assert isinstance(table, pd.DataFrame)
    emitted = table[table.emitted]
    assert emitted.token_id.tolist() == trace.output_ids
    assert set(table.kind) <= {"accepted draft", "rejected draft", "not verified", "correction", "bonus"}
    assert (table[table.kind == "rejected draft"].groupby("round").size() == 1).all()
    csv = table.to_csv(index=False)
    assert csv.splitlines()[0].startswith("round,position,kind,token_id")


def test_round_rows_show_marks_struck_corrections_and_masks(trace):
    rejected_round = next(r for r in trace.rounds if r.correction)
    page = render.round_rows_html(trace, rejected_round)
    assert page.count("sv-tok sv-struck") == sum(p.status != "accepted" for p in rejected_round.draft)
    # a draft model needs no [MASK] slots: the row says so, and the [MASK] slots are SpecDec's drafter's alone (Xia
    # et al. 2023)
    assert "✗" in page and page.count(">[MASK]<") == 0 and "no [MASK] slots" in page
    masked = dataclasses.replace(trace, config=trace.config.replace(drafter="maskquery"))
    slots = render.round_rows_html(masked, rejected_round).count(">[MASK]<")
    assert slots == len(rejected_round.draft) + trace.config.gamma
    assert boxes.COLORS["correction"][1] in page
    full_round = next((r for r in trace.rounds if r.bonus), None)
    if full_round is not None:
        assert "bonus token" in render.round_rows_html(trace, full_round)
    output = render.output_html(trace)
    assert output.count("<span") == len(trace.output_ids)


def test_the_player_carries_each_rounds_seed_rows_and_one_stylesheet(trace):
    page = player.lesson_html(trace)
    drawings = json.loads(page.split('<script id="drawings" type="application/json">')[1].split("</script>")[0])
    assert [d["rows"] for d in drawings] == [
        render.round_rows_html(trace, r).removeprefix(render.CSS) for r in trace.rounds
    ]
    assert page.count(render.CSS) == 1


def test_tree_svg_draws_every_node_edge_and_the_accepted_path(tiny_dirs, tiny_pair):
    config = DecodeConfig(
        target=tiny_dirs["target"],
        draft=tiny_dirs["draft"],
        drafter="tree",
        rule="sample",
        branching=2,
        tree_depth=3,
        max_new_tokens=16,
        seed=1,
        device="cpu",
    )
    rounds = speculative_decode(config, prompt_ids=[3, 7, 5, 9], pair=tiny_pair).rounds
    rnd = max(rounds, key=lambda r: (len(r.tree.path), len(r.tree.nodes)))
    svg = tree_drawing.tree_svg(rnd)
    ElementTree.fromstring(svg)  # well-formed, so it stands alone as a file
    nodes = rnd.tree.nodes
    assert svg.count("<circle") == len(nodes) and svg.count("<title>node ") == len(nodes)
    extra = rnd.correction or rnd.bonus
    assert svg.count("<line") == len(nodes) - 1 + (extra is not None)  # parent -> child edges, then the emitted token
    assert svg.count('stroke-width="4"') == len(rnd.tree.path)  # the accepted path is drawn thick
    for node in nodes[1:]:
        style = {"accepted": "accepted", "rejected": "rejected"}.get(node.status, "not_verified")
        assert f'fill="{boxes.COLORS[style][0]}">{html.escape(boxes.display_text(node.text))}</text>' in svg
    nodes[1].text = "\x01</svg><b>"  # a byte-fallback token and markup still make a well-formed picture
    ElementTree.fromstring(tree_drawing.tree_svg(rnd))
    for node in nodes:  # long labels are cut to their column and drawn clear of every node
        node.text = "a rather long token text"
    picture = ElementTree.fromstring(tree_drawing.tree_svg(rnd))
    circles = [(float(c.get("cx")), float(c.get("cy"))) for c in picture.iter("{http://www.w3.org/2000/svg}circle")]
    labels = [t for t in picture.iter("{http://www.w3.org/2000/svg}text") if t.get("text-anchor") == "middle"]
    assert len(labels) == len(nodes) and all(t.text.endswith("…") for t in labels)
    for label in labels:
        x, y, half = float(label.get("x")), float(label.get("y")), 13 * 0.62 * len(label.text) / 2  # monospace
        assert not [
            (cx, cy)
            for cx, cy in circles
            if x - half < cx + 7 and cx - 7 < x + half and y - 13 < cy + 7 and cy - 7 < y + 3
        ], label.text


@pytest.mark.parametrize("rule,lossy", [("greedy", False), ("sample", False), ("topbeta", True)])
def test_the_summary_says_when_the_rule_is_lossy(tiny_dirs, tiny_pair, rule, lossy):
    config = DecodeConfig(
        target=tiny_dirs["target"],
        draft=tiny_dirs["draft"],
        drafter="model",
        rule=rule,
        gamma=3,
        max_new_tokens=8,
        device="cpu",
    )
    line = summary_line(speculative_decode(config, prompt_ids=[3, 7, 5, 9], pair=tiny_pair))
    assert ("lossy rule" in line) == lossy and "rounds" in line
    # both models' precisions, each named for whose it is
    assert "cpu · target in float32 · draft in float32" in line


def test_the_drafter_attention_heatmap_names_h_t_and_never_overprints():
    from specviz.presentation.drafter_figures import drafter_attention_figure

    fig = drafter_attention_figure(torch.rand(3, 4 + 1 + 3), "Blockwise", window=4)
    ticks = list(fig.layout.xaxis.tickvals)
    assert ticks == list(fig.data[0].x) and "h[t]" in ticks and "x[t+1]" in ticks  # a short window: every column
    wide = list(drafter_attention_figure(torch.rand(4, 32 + 1 + 4), "Blockwise", window=32).layout.xaxis.tickvals)
    assert {"h[t]", "x[t+1]", "[M]4"} <= set(wide) and len(wide) <= 12  # a long one: every few, never a smear


def test_a_tree_rounds_walk_is_named_for_its_rule(tiny_dirs, tiny_pair):
    from specviz.presentation.player import round_drawing

    for rule, heading in (("sample", "Recursive rejection sampling"), ("greedy", "The walk down the tree")):
        config = DecodeConfig(
            target=tiny_dirs["target"],
            draft=tiny_dirs["draft"],
            drafter="tree",
            rule=rule,
            max_new_tokens=6,
            device="cpu",
        )
        trace = speculative_decode(config, prompt_ids=[3, 7, 5, 9], pair=tiny_pair)
        rows = round_drawing(trace, trace.rounds[0])["rows"]
        assert f"<h4>{heading}" in rows and ("Recursive rejection" in rows) == (rule == "sample")


def test_an_unknown_view_gets_a_message_and_a_known_one_none():
    assert parse_view({"view": "hack"}) == [
        "URL parameter view='hack' ignored (must be one of step, present, quiz, race); showing the page"
    ]
    assert parse_view({"view": "quiz"}) == [] and parse_view({}) == []


def test_an_infinite_temperature_gets_one_message_and_the_default():
    state = parse_query({"temperature": "inf"}, DecodeConfig())
    assert state.config.temperature == DecodeConfig().temperature and state.ignored == ("temperature",)
    assert len(state.messages) == 1 and "temperature" in state.messages[0], state.messages
