"""The teaching pages' numbers against independent computations."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch

from specviz.analysis import cost, metrics, paired, rules, sweep, timing, tree_vs_chain
from specviz.config import DecodeConfig
from specviz.engine import speculative_decode
from specviz.presentation import comparison, sweep_figures, verification_figures
from specviz.presentation.tables import token_table
from specviz.registry.rules import GREEDY, RULES, SAMPLING, TOP_BETA
from specviz.rules.distributions import softmax32
from specviz.runtime.protocol import KVCachedSequence
from specviz.runtime.reference import full_forward

PROMPT = [3, 7, 5, 9, 3, 7]


@pytest.fixture(scope="module")
def config(tiny_dirs):
    return DecodeConfig(
        target=tiny_dirs["target"],
        draft=tiny_dirs["draft"],
        drafter="model",
        rule="sample",
        gamma=4,
        max_new_tokens=30,
        seed=2,
        device="cpu",
    )


@pytest.fixture(scope="module")
def trace(config, tiny_pair):
    return speculative_decode(config, prompt_ids=PROMPT, pair=tiny_pair)


def test_acceptance_by_position_matches_the_token_table(trace):
    table = token_table(trace)
    drafted = table[table.kind.isin(["accepted draft", "rejected draft"])]
    expected = drafted.groupby("position").apply(lambda g: (g.kind == "accepted draft").mean(), include_groups=False)
    got = metrics.acceptance_by_position(trace).set_index("position").acceptance_rate
    assert np.allclose(got.sort_index().values, expected.sort_index().values)


def test_tokens_per_round_histogram_adds_up(trace):
    hist = metrics.tokens_per_round(trace)
    assert hist.rounds.sum() == trace.stats.rounds
    assert (hist.tokens * hist.rounds).sum() == trace.stats.new_tokens


def test_sampling_alpha_is_the_overlap_recomputed_from_the_models(config, tiny_pair, trace):
    """Recompute sum(min(p, q)) for the first round's first position directly from both models."""
    pos = trace.rounds[0].draft[0]
    with torch.inference_mode():
        p = softmax32(tiny_pair.target.model(torch.tensor([PROMPT])).logits[0, -1])
        q = softmax32(tiny_pair.draft.model(torch.tensor([PROMPT])).logits[0, -1])
    assert pos.overlap == pytest.approx(float(torch.minimum(p, q).sum()), abs=1e-5)
    assert pos.alpha == pos.overlap  # under speculative sampling alpha is the overlap


def test_theory_uses_the_realised_block_of_every_round(trace):
    check = metrics.theory_check(trace)
    blocks = [len(r.draft) for r in trace.rounds]
    assert list(check.blocks) == blocks and min(blocks) < trace.config.gamma  # the last round is clipped
    expected = sum(sum(check.alpha**i for i in range(k + 1)) for k in blocks) / len(blocks)
    assert check.expected_tokens_per_round == pytest.approx(expected)


@pytest.mark.parametrize("rule", ["greedy", "topbeta"])
def test_deterministic_rules_alpha_is_whether_the_drafts_argmax_passes(config, tiny_pair, rule):
    trace = speculative_decode(config.replace(rule=rule, beta=2, tau=1.0), prompt_ids=PROMPT, pair=tiny_pair)
    verified = [pos for r in trace.rounds for pos in r.draft if pos.status != "not_verified"]
    assert all(pos.alpha == float(pos.accepted) for pos in verified)  # the draft's token is its argmax
    assert trace.stats.alpha_estimate == pytest.approx(sum(p.accepted for p in verified) / len(verified))
    assert any(p.alpha != p.overlap for p in verified)  # the overlap is a different quantity here


def test_accepted_lengths_and_vllm_mean_acceptance_length(trace):
    lengths = metrics.accepted_lengths(trace)
    drafting = [r for r in trace.rounds if r.draft]
    assert lengths.rounds.sum() == len(drafting)
    assert 1 + (lengths.accepted * lengths.rounds).sum() / len(drafting) == pytest.approx(
        trace.stats.mean_acceptance_length
    )
    by_position = metrics.acceptance_by_position(trace)
    first = by_position.iloc[0]
    assert first.accepted_per_draft == pytest.approx(first.accepted / len(drafting))


def test_compare_rules_agrees_with_the_engine_on_its_own_round(tiny_dirs, tiny_pair):
    """Greedy verdicts recomputed by the page's fresh passes equal the engine's recorded verdicts."""
    config = DecodeConfig(
        target=tiny_dirs["target"],
        draft=tiny_dirs["draft"],
        drafter="model",
        rule="greedy",
        gamma=4,
        max_new_tokens=20,
        device="cpu",
    )
    trace = speculative_decode(config, prompt_ids=PROMPT, pair=tiny_pair)
    for rnd in (r for r in trace.rounds if r.draft):
        prefix = trace.prompt_ids + trace.output_ids[: rnd.prefix_len - len(PROMPT)]
        table = rules.compare_rules_on_draft(config, tiny_pair, prefix, [p.token_id for p in rnd.draft])
        greedy = table[table.rule == RULES[GREEDY].label].status.tolist()
        assert greedy == [p.status for p in rnd.draft]
        beta1 = table[table.rule.str.startswith(f"{RULES[TOP_BETA].label} beta=1 ")].status.tolist()
        assert beta1 == greedy
        sampled = table[table.rule == RULES[SAMPLING].label]  # each check's test, for the grid: min(1, p/q) vs u
        checked = sampled[sampled.status != "not_verified"]
        assert checked.uniform.between(0, 1).all() and checked.accept_prob.between(0, 1).all()
        assert ((checked.uniform < checked.accept_prob) == (checked.status == "accepted")).all()
        grid = comparison.rules_grid_figure(table, [p.text for p in rnd.draft]).data[0].text
        assert all(
            "{} vs u {}".format(*comparison.apart(a, u)) in cell  # row 2: sampling
            for a, u, cell in zip(checked.accept_prob, checked.uniform, grid[1])
        )
    assert comparison.apart(0.9658, 0.9701) == ("0.966", "0.970")  # a near tie reads as one: enough decimals
    assert comparison.apart(0.31, 0.87) == ("0.31", "0.87")


def test_lossy_departures_beta_one_never_departs(tiny_dirs, tiny_pair):
    config = DecodeConfig(
        target=tiny_dirs["target"],
        draft=tiny_dirs["draft"],
        drafter="model",
        gamma=4,
        max_new_tokens=16,
        tau=100.0,
        device="cpu",
    )
    table = rules.lossy_departures(config, tiny_pair, PROMPT)
    assert table.loc[table.beta == 1, "same_as_target"].item()
    assert list(table.beta) == [1, 2, 3, 4, 5]


def test_verification_mask_is_causal_over_prefix_and_draft():
    mask = timing.verification_mask(prefix_len=5, gamma=3)
    assert mask.shape == (4, 8)
    assert mask[0].tolist() == [1] * 5 + [0] * 3  # the last prefix token sees the prefix only
    assert mask[3].tolist() == [1] * 8  # the bonus position sees every drafted token
    assert all(mask[i].sum() == 5 + i for i in range(4))


def test_verification_timing_and_cost_ratio(config, tiny_pair):
    measured = timing.verification_timing(tiny_pair, PROMPT, [4, 5, 6, 7], repeats=3)
    assert measured["parallel_ms"] > 0 and measured["sequential_ms"] > 0 and measured["gamma"] == 4
    # as in a round: the last committed token and the 4 drafts, p at all 5
    assert measured["repeats"] == 3 and measured["tokens"] == 5
    one_token_prefix = timing.verification_timing(tiny_pair, PROMPT[:1], [4, 5], repeats=1)
    assert one_token_prefix["tokens"] == 3 and one_token_prefix["parallel_ms"] > 0
    assert cost.cost_ratio(config.replace(drafter="ngram"), tiny_pair, PROMPT) == 0.0
    assert cost.cost_ratio(config, tiny_pair, PROMPT) > 0


@pytest.mark.parametrize("prefix_len", [1, 3])
def test_pending_crops_a_timed_pass_back_to_the_prefix(tiny_pair, prefix_len):
    """What verification_timing relies on between its passes: after a pass over the last prefix token and a
    block, pending(prefix) leaves exactly prefix[:-1] cached and the last prefix token to feed."""
    prefix, block = PROMPT[:prefix_len], [4, 5, 6]
    state = KVCachedSequence()
    if prefix_len > 1:
        state.feed(full_forward, tiny_pair.target, prefix[:-1], 1)
    state.feed(full_forward, tiny_pair.target, [prefix[-1], *block], 4)
    assert state.cache.get_seq_length() == prefix_len + len(block)
    assert state.pending(prefix) == [prefix[-1]]
    assert state.ids == prefix[:-1] and state.cache.get_seq_length() == prefix_len - 1


def test_parallel_arrows_label_the_pass_and_the_one_token_passes():
    fig = verification_figures.parallel_arrows_figure(3, 10.0, 25.0)
    assert tuple(fig.data[-1].text) == (" 3 one-token forwards: 25.0 ms", " 1 forward over 3 tokens: 10.0 ms")
    widths = sorted(a.arrowwidth for a in fig.layout.annotations)
    assert widths == [2, 2, 2, 14]  # three one-token passes, one wide pass


def test_tree_vs_chain_same_greedy_output_fewer_passes_per_token(tiny_dirs, tiny_pair):
    config = DecodeConfig(
        target=tiny_dirs["target"],
        draft=tiny_dirs["draft"],
        drafter="tree",
        rule="greedy",
        branching=2,
        tree_depth=3,
        max_new_tokens=24,
        device="cpu",
    )
    table = tree_vs_chain.tree_vs_chain(config, tiny_pair, PROMPT)
    assert list(table.method) == ["tree RSD-C", "chain, γ = depth = 3", "chain, γ = tree budget = 14"]
    assert (table.new_tokens == 24).all()  # greedy: the same output whatever the drafting
    assert (table.target_passes == table.rounds).all()
    assert np.allclose(table.tokens_per_round, table.new_tokens / table.rounds)
    # hedging over two children per level accepts at least as much as the single chain of the same depth
    assert table.accepted_per_round[0] >= table.accepted_per_round[1]
    said = tree_vs_chain.verdict(table)  # the words follow the table's own numbers
    per_pass = said.split(";")[0]
    beaten = [c.method for _, c in table.iloc[1:].iterrows() if table.tokens_per_round[0] > c.tokens_per_round]
    assert per_pass.endswith(" and ".join(beaten)) if beaten else "no more than the chains" in per_pass
    assert ("it was faster than" in said) == bool((table.wall_s[0] < table.wall_s[1:]).any())
    assert "wall_s" not in tree_vs_chain.readable(table).columns


def test_gamma_sweep_progress_counts_its_real_steps(config, tiny_pair):
    calls = []
    table, c = sweep.gamma_sweep(
        config.replace(rule="greedy", max_new_tokens=10),
        tiny_pair,
        PROMPT,
        [1, 2, 4],
        lambda done, total, text: calls.append((done, total, text)),
    )
    # three block sizes, c, the verification costs; the runs of each cycle report themselves in run order
    assert {total for _, total, _ in calls} == {3 + 2}
    assert calls[-1][0] == calls[-1][1] and [done for done, _, _ in calls] == sorted(done for done, _, _ in calls)
    runs = [text for _, _, text in calls if "(run " in text]
    cycle = ["the target alone", "γ = 1", "γ = 2", "γ = 4"]
    expected = cycle + cycle[::-1] + cycle  # three cycles, the order reversed every other one
    assert runs == [f"{name} (run {i} of 12)" for i, name in enumerate(expected, 1)]
    assert list(table.gamma) == [1, 2, 4] and c > 0
    # the theory predicted with the measured pass over k + 1 tokens: a dearer pass than one step predicts less
    assert (table.verify_cost > 0).all()
    for row in table.itertuples():
        assert (row.expected_speedup_verify_measured < row.expected_speedup) == (row.verify_cost > 1.0)
    # the median within its cycles
    assert ((table.speedup_low <= table.speedup) & (table.speedup <= table.speedup_high)).all()
    fig = sweep_figures.gamma_sweep_figure(table, 2, [4])
    timed = next(t for t in fig.data if t.name == "the sweep's timed ratio")
    assert math.isnan(timed.y[2]) and not math.isnan(timed.y[0])  # γ = 4 measured the load: no point of the line
    crosses = next(t for t in fig.data if t.name == "timed under load (no result)")
    assert list(crosses.x) == [4] and list(crosses.y) == [table.speedup[2]]
    bars = timed.error_y
    assert list(bars.array) == pytest.approx(list(table.speedup_high - table.speedup))
    assert list(bars.arrayminus) == pytest.approx(list(table.speedup - table.speedup_low))
    # the legend speaks words, not column names
    assert [t.name for t in fig.data][:4] == [
        "measured tokens per round",
        "theory tokens per round",
        "the sweep's timed ratio",
        "theory speedup (v = 1)",
    ]


def test_timed_pairs_alternate_their_order_and_report_medians():
    order = []

    def timed(name: str, seconds: list[float]):
        return lambda: (order.append(name) or f"{name}{len(order)}", seconds.pop(0))

    result = paired.timed_in_alternating_pairs(timed("a", [1.0, 9.0, 2.0]), timed("b", [5.0, 4.0, 30.0]), pairs=3)
    assert order == ["a", "b", "b", "a", "a", "b"]  # a noisy moment falls on both sides in turn
    assert (result.first, result.second) == ("a1", "b2")  # each side's first result
    assert (result.first_median, result.second_median) == (2.0, 5.0)  # medians: one slow run sets neither
    assert result.ratios == pytest.approx([1.0 / 5.0, 9.0 / 4.0, 2.0 / 30.0])  # pair by pair, in pair order


def test_block_sizes_whose_pairs_overlap_the_best_are_a_tie():
    table = pd.DataFrame(
        dict(
            gamma=[1, 2, 3], speedup=[1.26, 1.25, 0.90], speedup_low=[1.20, 1.22, 0.85], speedup_high=[1.30, 1.27, 0.95]
        )
    )
    assert sweep.gammas_tied_with(table, 1) == [2]  # gamma 2's fastest pair (1.27) beats gamma 1's slowest (1.20)
    assert sweep.gammas_tied_with(table.assign(speedup_high=[1.30, 1.20, 0.95]), 1) == [2]  # reaching it is enough
    assert sweep.gammas_tied_with(table.assign(speedup_high=[1.30, 1.15, 0.95]), 1) == []


def test_measured_speedup_times_both_runs_now_not_the_stored_trace(config, tiny_pair):
    trace = speculative_decode(config.replace(rule="greedy", max_new_tokens=12), prompt_ids=PROMPT, pair=tiny_pair)
    trace.stats.wall_ms = 1e9  # as if the stored trace had been timed on a machine busy with something else
    check = metrics.measured_speedup(trace, tiny_pair)
    assert 0 < check.speculative_s < 1e6 and check.autoregressive_s > 0  # re-timed, not read from the trace
    assert check.measured == pytest.approx(check.autoregressive_s / check.speculative_s)
    assert len(check.pair_speedups) == 3 and min(check.pair_speedups) <= check.measured <= max(check.pair_speedups)
    assert check.cost_ratio > 0 and check.expected > 0 and check.expected_verify_measured > 0


def test_snippets_are_cut_at_word_boundaries():
    from specviz.analysis.rules import word_snippet

    text = "the quick brown fox jumps over the lazy dog"
    assert word_snippet(text, 100) == text
    assert word_snippet(text, 17) == "the quick brown…"  # not "the quick brown f"
    assert word_snippet(text, 14, from_end=True) == "…the lazy dog"  # not "…er the lazy dog"


def test_two_runs_are_compared_token_by_token_and_round_by_round(config, tiny_pair):
    from specviz.analysis import whatif

    greedy = speculative_decode(config.replace(rule="greedy", gamma=2), prompt_ids=PROMPT, pair=tiny_pair)
    sampled = speculative_decode(
        config.replace(rule="sample", gamma=5, temperature=1.5, seed=3), prompt_ids=PROMPT, pair=tiny_pair
    )
    diff = whatif.run_difference(greedy, sampled)
    first = next(i for i, (a, b) in enumerate(zip(greedy.output_ids, sampled.output_ids)) if a != b)
    assert diff.first_departure == first  # a hot sampler and greedy part early on this tiny pair
    texts = [t for r in greedy.rounds for t in r.emitted_texts]
    assert diff.common_text == "".join(texts[:first]) and diff.first_rest == "".join(texts[first:])
    assert diff.per_round["first run"].sum() == len(greedy.output_ids)
    assert diff.per_round["second run"].sum() == len(sampled.output_ids)
    assert whatif.changed_settings(greedy, sampled) == {
        "gamma": (2, 5),
        "temperature": (config.temperature, 1.5),
        "rule": ("greedy", "sample"),
    }
    same = whatif.run_difference(greedy, greedy)
    assert same.first_departure is None and same.first_rest == same.second_rest == ""


def test_each_drafter_has_one_colour_in_every_chart_of_a_page():
    import pandas as pd

    from specviz.presentation import drafter_figures

    by_position = pd.DataFrame({"drafter": ["EAGLE", "draft model"], "position": [1, 1], "acceptance_rate": [0.4, 0.6]})
    calibration = pd.DataFrame(
        {"drafter": ["draft model"], "confidence": [0.5], "acceptance_rate": [0.5], "verified": [10]}
    )  # EAGLE absent here: the colours must not shift
    bars = {t.name: t.marker.color for t in drafter_figures.acceptance_by_drafter_figure(by_position).data}
    lines = {t.name: t.line.color for t in drafter_figures.confidence_calibration_figure(calibration).data[1:]}
    assert lines["draft model"] == bars["draft model"] != bars["EAGLE"]


def test_a_sweep_says_which_gammas_measured_load():
    import pandas as pd

    table = pd.DataFrame(
        {
            "gamma": [1, 2, 3],
            "speedup": [1.1, 13.0, 1.3],
            "speedup_low": [1.0, 6.0, 0.7],
            "speedup_high": [1.2, 21.0, 1.4],
            "expected_speedup": [1.3, 2.0, 2.2],
        }
    )
    # γ 2 beats Thm. 3.8 sixfold and its pairs disagree; γ 3's pairs disagree twofold; γ 1 is quiet
    assert sweep.loaded_gammas(table) == [2, 3]


def test_a_sweep_runs_as_many_cycles_as_its_time_budget_holds():
    config = DecodeConfig(max_new_tokens=32)
    assert sweep.sweep_cycles(config, gammas=6, target_step_ms=1.0) == 3  # a tiny model: every cycle fits
    assert sweep.sweep_cycles(config, gammas=6, target_step_ms=260.0) == 1  # a 1.5B model on 2 cores: one
    assert sweep.sweep_tokens(DecodeConfig(max_new_tokens=500)) == 64  # the page's, the work's and the estimate's
    one = sweep.sweep_seconds(260.0, 32, 6, 1)
    assert one == pytest.approx(7 * 32 * 0.26) and sweep.sweep_seconds(260.0, 32, 6, 2) == pytest.approx(2 * one)
