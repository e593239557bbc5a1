"""Recursive Speculative Decoding: exactness, reduction to the chain, losslessness, one target pass."""

from __future__ import annotations

import contextlib
import dataclasses
from collections import Counter

import pytest
import torch

from specviz.analysis.lab import chi_square_power, goodness_of_fit
from specviz.config import DecodeConfig
from specviz.drafters.modules import make_drafter, on_this_machine
from specviz.engine import ModelPair, speculative_decode
from specviz.engine.trace import Trace
from specviz.models.loading import load_model
from specviz.models.profile import PassProfile, model_profile
from specviz.registry.drafter_settings import TreeSettings, flat_width
from specviz.rules.distributions import gumbel_top_k, softmax32, without_token
from specviz.runtime.cpu.kernel_paths import kernels_of
from specviz.serving.urlstate import parse_query, to_query
from specviz.settings import ConfigError

from .conftest import target_greedy
from .test_engine import PROMPT


def tree_config(tiny_dirs, **changes) -> DecodeConfig:
    base = DecodeConfig(
        target=tiny_dirs["target"],
        draft=tiny_dirs["draft"],
        drafter="tree",
        rule="greedy",
        tree_mode="constant",
        branching=2,
        tree_depth=3,
        max_new_tokens=24,
        device="cpu",
    )
    return base.replace(**changes)


@pytest.mark.parametrize(
    "changes",
    [
        dict(tree_mode="constant", branching=2, tree_depth=3),
        dict(tree_mode="constant", branching=3, tree_depth=2),
        dict(tree_mode="beam", beam_width=3, tree_depth=4),
    ],
)
def test_greedy_tree_matches_target_generate(tiny_dirs, tiny_pair, changes):
    trace = speculative_decode(tree_config(tiny_dirs, **changes), prompt_ids=PROMPT, pair=tiny_pair)
    assert trace.output_ids == target_greedy(tiny_pair.target, PROMPT, 24)
    assert any(r.tree.path for r in trace.rounds)  # some drafted nodes were accepted


@pytest.mark.parametrize("depth", [2, 4])
def test_a_tree_sized_to_the_flat_pass_follows_the_profile_and_is_the_targets_greedy(tiny_dirs, tiny_pair, depth):
    config = tree_config(tiny_dirs, tree_mode="flat", tree_depth=depth)
    trace = speculative_decode(config, prompt_ids=PROMPT, pair=tiny_pair)
    assert trace.output_ids == target_greedy(tiny_pair.target, PROMPT, 24)
    measured = model_profile(tiny_pair.target).flat_until()  # this machine's flat region
    assert trace.config.value("flat_block") == measured  # the run made the choice, and its trace records it
    width = flat_width(measured, depth)
    full = [r.tree for r in trace.rounds if r.tree and len(r.tree.levels) == depth]
    assert full and all(max(len(level) for level in tree.levels) <= width for tree in full)
    assert TreeSettings(tree_mode="flat").tree_nodes(depth) >= width * depth  # the bound the config checks
    assert flat_width(8, 2) == 4 and flat_width(8, 3) == 2 and flat_width(0, 3) == 1


def profile_with_verify_costs(profile: PassProfile, costs: list[float]) -> PassProfile:
    """``profile`` as another machine would measure it, quiet: v(k) = ``costs[k - 1]`` for k = 1..8."""
    step = profile.step_ms
    return dataclasses.replace(
        profile, pass_ms=(step, *(step * v for v in costs)), spread=1.0, cpu_share=1.0, other_cores=0.0
    )


FLAT_MACHINE = [1.0] * 8  # every pass up to 9 tokens costs one step: flat_until 8
STEEP_MACHINE = [1.1, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]  # only the pass over 2 tokens is flat: flat_until 1


@contextlib.contextmanager
def measured_as(loaded, costs: list[float]):
    """The loaded target with the profile another machine would have measured (its kernel path's), then its own."""
    path, own = kernels_of(loaded.model), model_profile(loaded)
    loaded.profiles[path] = profile_with_verify_costs(own, costs)
    try:
        yield
    finally:
        loaded.profiles[path] = own


def test_a_flat_trees_config_draws_the_same_tree_whatever_the_machine_profile_says(tiny_dirs, tiny_pair):
    """Reproducibility: the flat block is resolved once into the config (and its link), so building the tree
    drafter from that config never reads the machine profile: two machines, one flat and one steep, draw the same
    trees from one link and seed; an open choice is made from each machine's own profile."""
    open_choice = tree_config(tiny_dirs, tree_mode="flat", tree_depth=2, rule="sample", seed=3)
    with measured_as(tiny_pair.target, FLAT_MACHINE):
        made_here = on_this_machine(open_choice, tiny_pair.target)
        here = speculative_decode(made_here, prompt_ids=PROMPT, pair=tiny_pair)
        drafter_here = make_drafter(made_here, tiny_pair)
    with measured_as(tiny_pair.target, STEEP_MACHINE):
        assert on_this_machine(open_choice, tiny_pair.target).value("flat_block") == 1  # its own choice differs
        link = to_query(made_here, "", 1, DecodeConfig())
        carried = parse_query(link, DecodeConfig()).config  # the link opened on the other machine
        there = speculative_decode(carried, prompt_ids=PROMPT, pair=tiny_pair)
        drafter_there = make_drafter(carried, tiny_pair)
    assert made_here.value("flat_block") == 8 and link["flat_block"] == "8"
    assert carried.value("flat_block") == 8
    assert drafter_here.width == drafter_there.width == flat_width(8, 2)
    assert [r.tree.levels for r in here.rounds if r.tree] == [r.tree.levels for r in there.rounds if r.tree]
    assert max(len(level) for r in here.rounds if r.tree for level in r.tree.levels) > 1  # a wide tree was drawn
    assert here.output_ids == there.output_ids


def test_building_a_flat_tree_with_its_choice_open_says_so(tiny_dirs, tiny_pair):
    with pytest.raises(ConfigError, match="flat tree's block"):
        make_drafter(tree_config(tiny_dirs, tree_mode="flat"), tiny_pair)


def test_greedy_tree_with_a_layer_skip_draft(tiny_dirs, tiny_pair):
    config = tree_config(tiny_dirs, draft=None, skip_layers=(1, 2))
    trace = speculative_decode(config, prompt_ids=PROMPT, pair=ModelPair(tiny_pair.target))
    assert trace.output_ids == target_greedy(tiny_pair.target, PROMPT, 24)


@pytest.mark.parametrize("seed", range(6))
def test_one_child_per_node_is_standard_speculative_sampling(tiny_dirs, tiny_pair, seed):
    chain = DecodeConfig(
        target=tiny_dirs["target"],
        draft=tiny_dirs["draft"],
        drafter="model",
        rule="sample",
        gamma=3,
        max_new_tokens=20,
        seed=seed,
        device="cpu",
    )
    tree = chain.replace(drafter="tree", tree_mode="constant", branching=1, tree_depth=3)
    assert (
        speculative_decode(tree, prompt_ids=PROMPT, pair=tiny_pair).output_ids
        == speculative_decode(chain, prompt_ids=PROMPT, pair=tiny_pair).output_ids
    )


@pytest.mark.slow  # a statistical test at its computed power: many samples
@pytest.mark.parametrize(
    "changes",
    [dict(tree_mode="constant", branching=3, tree_depth=2), dict(tree_mode="beam", beam_width=4, tree_depth=2)],
)
def test_recursive_rejection_sampling_preserves_target_distribution(tiny_dirs, tiny_pair, changes):
    n = 500  # the power check below: the draft's own law would be caught with certainty at this n
    with torch.inference_mode():
        p = softmax32(tiny_pair.target.model(torch.tensor([PROMPT])).logits[0, -1])
        q = softmax32(tiny_pair.draft.model(torch.tensor([PROMPT])).logits[0, -1])
    assert chi_square_power(p, q, n, level=1e-6) > 0.999
    config = tree_config(tiny_dirs, rule="sample", max_new_tokens=3, **changes)
    firsts = [
        speculative_decode(config.replace(seed=s), prompt_ids=PROMPT, pair=tiny_pair).output_ids[0] for s in range(n)
    ]
    assert goodness_of_fit(firsts, p) > 1e-3
    assert goodness_of_fit(firsts, q) < 1e-6  # the test has the power to see a wrong distribution


def test_every_node_is_scored_in_one_target_pass(tiny_dirs, tiny_pair):
    calls = []
    handle = tiny_pair.target.model.register_forward_hook(lambda module, args, kwargs_out: calls.append(1))
    try:
        trace = speculative_decode(tree_config(tiny_dirs, rule="sample", seed=3), prompt_ids=PROMPT, pair=tiny_pair)
    finally:
        handle.remove()
    assert len(calls) == len(trace.rounds) == trace.stats.target_forward_passes
    for r in trace.rounds:
        assert r.target_positions == len(r.tree.nodes)  # the root and every drafted node, in the one pass
        assert r.draft_forward_passes == len(r.tree.levels)  # one draft pass per draft iteration
    first = trace.rounds[0].tree
    assert [len(level) for level in first.levels] == [2, 4, 8]  # constant branching 2, depth 3


def test_tree_trace_round_trips_and_walk_is_consistent(tiny_dirs, tiny_pair):
    trace = speculative_decode(
        tree_config(tiny_dirs, rule="sample", seed=5, tree_mode="beam", beam_width=3), prompt_ids=PROMPT, pair=tiny_pair
    )
    assert Trace.from_json(trace.to_json()) == trace
    for r in trace.rounds:
        tree = r.tree
        path_tokens = [tree.nodes[i].token_id for i in tree.path]
        assert r.emitted_ids[:-1] == path_tokens
        assert len(tree.check_nodes) == len(r.draft) == len(tree.residual_tops)
        for node in tree.path:  # an accepted node's parent is the root or an accepted node
            parent = tree.nodes[node].parent
            assert parent == 0 or parent in tree.path
        assert all(len(level) <= 3 for level in tree.levels)


def test_gumbel_top_k_draws_without_replacement():
    gen = torch.Generator().manual_seed(0)
    probs = torch.tensor([0.5, 0.3, 0.2, 0.0])
    draws = [gumbel_top_k(probs, 2, gen) for _ in range(4000)]
    assert all(len(set(d)) == 2 and 3 not in d for d in draws)
    first = Counter(d[0] for d in draws)
    assert abs(first[0] / 4000 - 0.5) < 0.03  # the first draw is distributed as probs
    # second draw given first = 0 is 0.3/0.5 = 0.6 for token 1
    seconds = [d[1] for d in draws if d[0] == 0]
    assert abs(seconds.count(1) / len(seconds) - 0.6) < 0.04
    assert without_token(probs, 0).tolist() == pytest.approx([0.0, 0.6, 0.4, 0.0])


def test_tree_bounds_are_checked(tiny_dirs):
    with pytest.raises(ConfigError, match="nodes"):
        tree_config(tiny_dirs, branching=8, tree_depth=4).validated()
    with pytest.raises(ConfigError, match="tree_mode"):
        tree_config(tiny_dirs, tree_mode="forest").validated()


def test_a_tree_round_that_accepts_eos_records_nothing_after_it(tiny_dirs):
    """draft = target accepts the whole greedy path; this prompt's path reaches EOS before the tree's depth."""
    target = load_model(tiny_dirs["target"], "cpu")
    config = DecodeConfig(
        target=tiny_dirs["target"],
        draft=tiny_dirs["target"],
        drafter="tree",
        rule="greedy",
        tree_depth=4,
        branching=1,
        max_new_tokens=40,
        device="cpu",
    )
    trace = speculative_decode(config, prompt_ids=[29, 14, 26, 30, 15, 3], pair=ModelPair(target, target))
    assert trace.stats.stop_reason == "eos"
    last = trace.rounds[-1]
    assert last.emitted_ids[-1] == 1 and last.correction is None and last.bonus is None  # EOS was an accepted node
    for rnd in trace.rounds:
        path_tokens = [rnd.tree.nodes[i].token_id for i in rnd.tree.path]
        assert path_tokens == rnd.emitted_ids[: len(path_tokens)]
        assert len(rnd.emitted_ids) == len(path_tokens) + (rnd.correction is not None or rnd.bonus is not None)
        accepted = [n.index for n in rnd.tree.nodes[1:] if n.status == "accepted"]
        assert accepted == rnd.tree.path
