"""The teaching pages' numbers against independent computations."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from specviz import analysis
from specviz.config import DecodeConfig
from specviz.engine import speculative_decode
from specviz.tables import token_table
from specviz.verify import softmax32

PROMPT = [3, 7, 5, 9, 3, 7]


@pytest.fixture(scope="module")
def config(tiny_dirs):
    return DecodeConfig(target=tiny_dirs["target"], draft=tiny_dirs["draft"], drafter="model", rule="sample",
                        gamma=4, max_new_tokens=30, seed=2, device="cpu")


@pytest.fixture(scope="module")
def trace(config, tiny_pair):
    return speculative_decode(config, prompt_ids=PROMPT, pair=tiny_pair)


def test_acceptance_by_position_matches_the_token_table(trace):
    table = token_table(trace)
    drafted = table[table.kind.isin(["accepted draft", "rejected draft"])]
    expected = drafted.groupby("position").apply(lambda g: (g.kind == "accepted draft").mean(), include_groups=False)
    got = analysis.acceptance_by_position(trace).set_index("position").acceptance_rate
    assert np.allclose(got.sort_index().values, expected.sort_index().values)


def test_tokens_per_round_histogram_adds_up(trace):
    hist = analysis.tokens_per_round(trace)
    assert hist.rounds.sum() == trace.stats.rounds
    assert (hist.tokens * hist.rounds).sum() == trace.stats.new_tokens


def test_alpha_is_the_mean_overlap_recomputed_from_the_models(config, tiny_pair, trace):
    """Recompute sum(min(p, q)) for the first round's first position directly from both models."""
    pos = trace.rounds[0].draft[0]
    with torch.inference_mode():
        p = softmax32(tiny_pair.target.model(torch.tensor([PROMPT])).logits[0, -1])
        q = softmax32(tiny_pair.draft.model(torch.tensor([PROMPT])).logits[0, -1])
    assert pos.overlap == pytest.approx(float(torch.minimum(p, q).sum()), abs=1e-5)
    check = analysis.theory_check(trace)
    assert check.expected_tokens_per_round == pytest.approx(sum(check.alpha**i for i in range(check.gamma + 1)))


def test_compare_rules_agrees_with_the_engine_on_its_own_round(tiny_dirs, tiny_pair):
    """Greedy verdicts recomputed by the page's fresh passes equal the engine's recorded verdicts."""
    config = DecodeConfig(target=tiny_dirs["target"], draft=tiny_dirs["draft"], drafter="model", rule="greedy",
                          gamma=4, max_new_tokens=20, device="cpu")
    trace = speculative_decode(config, prompt_ids=PROMPT, pair=tiny_pair)
    for rnd in (r for r in trace.rounds if r.draft):
        prefix = trace.prompt_ids + trace.output_ids[: rnd.prefix_len - len(PROMPT)]
        table = analysis.compare_rules_on_draft(config, tiny_pair, prefix, [p.token_id for p in rnd.draft])
        greedy = table[table.rule == "greedy"].status.tolist()
        assert greedy == [p.status for p in rnd.draft]
        beta1 = table[table.rule.str.startswith("top-β β=1 ")].status.tolist()
        assert beta1 == greedy


def test_lossy_departures_beta_one_never_departs(tiny_dirs, tiny_pair):
    config = DecodeConfig(target=tiny_dirs["target"], draft=tiny_dirs["draft"], drafter="model", gamma=4,
                          max_new_tokens=16, tau=100.0, device="cpu")
    table = analysis.lossy_departures(config, tiny_pair, PROMPT)
    assert table.loc[table.beta == 1, "same_as_target"].item()
    assert list(table.beta) == [1, 2, 3, 4, 5]


def test_lab_sampling_is_exact_and_the_broken_rule_is_caught(config, tiny_pair):
    table = analysis.sample_first_tokens(config.replace(gamma=3), tiny_pair, PROMPT, 400, 1)
    probs = analysis.first_token_probs(config, tiny_pair, PROMPT)
    first = {arm: table[table.arm == arm].token_id.tolist() for arm in analysis.ARMS}
    assert analysis.goodness_of_fit(first["speculative sampling"], probs) > 1e-3
    assert analysis.goodness_of_fit(first["target sampling"], probs) > 1e-3
    assert analysis.goodness_of_fit(first["broken rule"], probs) < 1e-3


def test_broken_rule_bias_matches_its_closed_form(config, tiny_pair):
    """P_broken(x) = min(p, q)(x) + (1 - sum min(p, q)) p(x): check the lab's broken arm against it."""
    with torch.inference_mode():
        p = softmax32(tiny_pair.target.model(torch.tensor([PROMPT])).logits[0, -1])
        q = softmax32(tiny_pair.draft.model(torch.tensor([PROMPT])).logits[0, -1])
    broken = torch.minimum(p, q) + (1 - torch.minimum(p, q).sum()) * p
    table = analysis.sample_first_tokens(config.replace(gamma=3), tiny_pair, PROMPT, 400, 1)
    ids = table[table.arm == "broken rule"].token_id.tolist()
    assert analysis.goodness_of_fit(ids, broken) > 1e-3


def test_verification_mask_is_causal_over_prefix_and_draft():
    mask = analysis.verification_mask(prefix_len=5, gamma=3)
    assert mask.shape == (4, 8)
    assert mask[0].tolist() == [1] * 5 + [0] * 3  # the last prefix token sees the prefix only
    assert mask[3].tolist() == [1] * 8  # the bonus position sees every drafted token
    assert all(mask[i].sum() == 5 + i for i in range(4))


def test_verification_timing_and_cost_ratio(config, tiny_pair):
    timing = analysis.verification_timing(tiny_pair, PROMPT, [4, 5, 6, 7], repeats=3)
    assert timing["parallel_ms"] > 0 and timing["sequential_ms"] > 0 and timing["gamma"] == 4
    assert analysis.cost_ratio(config.replace(drafter="ngram"), tiny_pair, PROMPT) == 0.0
    assert analysis.cost_ratio(config, tiny_pair, PROMPT) > 0


def test_tree_vs_chain_same_greedy_output_fewer_passes_per_token(tiny_dirs, tiny_pair):
    config = DecodeConfig(target=tiny_dirs["target"], draft=tiny_dirs["draft"], drafter="tree", rule="greedy",
                          branching=2, tree_depth=3, max_new_tokens=24, device="cpu")
    table = analysis.tree_vs_chain(config, tiny_pair, PROMPT)
    assert list(table.method) == ["tree RSD-C", "chain, γ = depth = 3", "chain, γ = tree budget = 14"]
    assert (table.new_tokens == 24).all()  # greedy: the same output whatever the drafting
    assert (table.target_passes == table.rounds).all()
    assert np.allclose(table.tokens_per_round, table.new_tokens / table.rounds)
    # hedging over two children per level accepts at least as much as the single chain of the same depth
    assert table.accepted_per_round[0] >= table.accepted_per_round[1]
