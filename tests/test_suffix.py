"""SuffixDecoding's drafter (Oliaro et al. 2025): the suffix trees' candidates on a known history, greedy exactness with
and without the draft model in the tree, the server's history of answers, sampling's law, the round view's sources."""

from __future__ import annotations

import pytest
import torch

from specviz.analysis.lab import chi_square_power, goodness_of_fit
from specviz.analysis.rules import compare_rules_on_draft, compared_draft
from specviz.drafters.suffix import FROM_DRAFT_MODEL, FROM_HISTORY, FROM_PROMPT, ServerHistory, add_candidates
from specviz.drafters.suffix_tree import Candidate, SuffixTrie
from specviz.engine import ModelPair, speculative_decode
from specviz.presentation.player import round_drawing
from specviz.registry.drafter_settings import SuffixSettings
from specviz.rules.distributions import softmax32

from .conftest import target_greedy
from .test_engine import PROMPT, tiny_config
from .test_pages import open_page, params, press  # noqa: F401  (the tiny pair's link)

REPEATS = [3, 7, 5, 9, 11, 13, 4, 6, 8, 10, 3, 7, 5, 9, 11, 13, 4, 6]  # its end matches 8 tokens of its start
HISTORY = [1, 2, 3, 4, 1, 2, 3, 5, 1, 2, 3, 4]  # after "1 2 3": 4 twice, 5 once; after "3 4": "1" once


def suffix_config(tiny_dirs, **changes):
    return tiny_config(tiny_dirs, **{"drafter": "suffix", "suffix_history": False, **changes})


def test_the_trie_counts_every_suffix_and_matches_the_longest():
    trie = SuffixTrie(longest_pattern=3, depth=4)
    trie.extend("a", HISTORY)
    assert trie.root.children[1].count == 3 and trie.root.children[1].children[2].children[3].count == 3
    assert set(trie.root.children[1].children[2].children[3].children) == {4, 5}
    assert 1 in trie.root.children[2].children[3].children[4].children  # "2 3 4 1": four tokens, kept
    assert not trie.root.children[1].children[2].children[3].children[4].children  # "1 2 3 4 1" is cut
    node, length = trie.longest_match([9, 9, 1, 2, 3])
    assert length == 3 and node is trie.root.children[1].children[2].children[3]
    assert trie.longest_match([9, 8]) == (trie.root, 0)  # nothing matched
    trie.extend("a", [1])  # appended to the same sequence: "3 4" followed by 1 twice now
    assert trie.root.children[3].children[4].children[1].count == 2


def test_the_speculation_tree_is_scored_by_frequency_sized_by_the_match_and_pruned():
    trie = SuffixTrie(longest_pattern=4, depth=8)
    trie.extend("a", HISTORY)
    speculation = trie.speculate([7, 2, 3], alpha=4, max_nodes=16, depth=3, floor=0.1)  # "2 3" (m = 2): 8 nodes
    tree = speculation.candidates
    assert tree[0] == Candidate(-1, 4, pytest.approx(2 / 3)) and tree[1] == Candidate(0, 1, pytest.approx(2 / 3))
    assert Candidate(-1, 5, pytest.approx(1 / 3)) in tree
    assert all(c.parent < i for i, c in enumerate(tree))  # a parent before its children
    assert [c.score for c in tree] == sorted((c.score for c in tree), reverse=True)  # best first
    assert max(depth_of(tree, i) for i in range(len(tree))) == 3  # the round's γ bounds the depth
    assert len(trie.speculate([7, 2, 3], alpha=1, max_nodes=16, depth=3, floor=0.1).candidates) == 2  # α · m nodes
    assert len(trie.speculate([7, 2, 3], alpha=4, max_nodes=3, depth=3, floor=0.1).candidates) == 3  # the ceiling
    pruned = trie.speculate([7, 2, 3], alpha=4, max_nodes=16, depth=3, floor=0.5).candidates
    assert pruned and all(c.token != 5 for c in pruned)
    assert trie.speculate([7, 8], alpha=4, max_nodes=16, depth=3, floor=0.1).candidates == []
    # the expected accepted tokens: the path scores summed, discounted by the share of the longest pattern matched
    assert speculation.matched == 2 and speculation.expected == pytest.approx(sum(c.score for c in tree) * 2 / 4)


def depth_of(tree: list[Candidate], index: int) -> int:
    return 1 if tree[index].parent < 0 else 1 + depth_of(tree, tree[index].parent)


def test_a_candidate_the_tree_holds_is_merged_below_it():
    from specviz.drafters.base import DraftTree, TreeNode

    tree = DraftTree(nodes=[TreeNode(0, -1, 0, 9, 1.0, 0)], levels=[], draft_probs={})
    add_candidates(tree, [Candidate(-1, 4, 0.9), Candidate(0, 1, 0.8)], FROM_PROMPT, 8)
    add_candidates(tree, [Candidate(-1, 4, 0.5), Candidate(0, 2, 0.4), Candidate(-1, 5, 0.3)], FROM_HISTORY, 8)
    assert [(n.token_id, n.parent, n.source) for n in tree.nodes[1:]] == [
        (4, 0, FROM_PROMPT),
        (1, 1, FROM_PROMPT),
        (2, 1, FROM_HISTORY),
        (5, 0, FROM_HISTORY),
    ]
    assert tree.levels == [[1, 4], [2, 3]] and all(float(tree.drawn_from[n].max()) == 1.0 for n in (1, 2, 3, 4))


@pytest.mark.parametrize("model_below", [0.0, 1.0, 16.0])  # the draft model never, where unsure, every round
@pytest.mark.parametrize("rule", ["greedy", "topbeta"])
def test_greedy_suffix_drafting_is_the_targets_own_greedy(tiny_dirs, tiny_pair, model_below, rule):
    config = suffix_config(tiny_dirs, suffix_model_below=model_below, rule=rule)
    trace = speculative_decode(config, prompt_ids=REPEATS, pair=tiny_pair)
    if rule == "greedy":
        assert trace.output_ids == target_greedy(tiny_pair.target, REPEATS, 24)
    sources = {node.source for r in trace.rounds for node in r.tree.nodes[1:]}
    assert FROM_PROMPT in sources  # the prompt repeats 8 tokens: their continuation was looked up
    if model_below != 1.0:  # where unsure: whether it was depends on the text
        assert (FROM_DRAFT_MODEL in sources) == (model_below > 0)
    if model_below == 0:
        assert trace.stats.draft_forward_passes == 0  # the suffix trees alone read no model


def test_without_a_draft_model_the_suffix_trees_draft_alone(tiny_dirs, tiny_pair):
    trace = speculative_decode(suffix_config(tiny_dirs), prompt_ids=PROMPT, pair=ModelPair(tiny_pair.target))
    assert trace.output_ids == target_greedy(tiny_pair.target, PROMPT, 24)
    assert trace.stats.draft_forward_passes == 0


def test_the_servers_earlier_answers_are_looked_up_by_the_next_run(tiny_dirs, tiny_pair, monkeypatch):
    """The class's workload: a second run of a prompt finds the first run's answer in the server's suffix tree and
    drafts it, the draft model never asked (it joins only where the suffix trees are unsure)."""
    from specviz.drafters import suffix

    monkeypatch.setattr(suffix, "HISTORIES", {})  # this test's own server: no earlier answer
    config = suffix_config(tiny_dirs, suffix_history=True, max_new_tokens=40, suffix_nodes=16, suffix_alpha=8)
    first = speculative_decode(config, prompt_ids=PROMPT, pair=tiny_pair)
    again = speculative_decode(config, prompt_ids=PROMPT, pair=tiny_pair)
    assert again.output_ids == first.output_ids == target_greedy(tiny_pair.target, PROMPT, 40)
    assert any(node.source == FROM_HISTORY for r in again.rounds for node in r.tree.nodes[1:])
    assert again.stats.mean_tokens_per_round > first.stats.mean_tokens_per_round
    assert suffix.HISTORIES[tiny_pair.target.name].trie.tokens > 0


def test_the_history_is_bounded(monkeypatch):
    from specviz.drafters import suffix

    monkeypatch.setattr(suffix, "HISTORY_TOKENS", 10)
    history = ServerHistory()
    history.extend(0, list(range(8)))
    history.extend(1, list(range(8)))  # past the bound: the oldest answers go
    assert history.trie.tokens == 8


def test_the_round_view_says_where_each_drafted_token_came_from(tiny_dirs, tiny_pair):
    trace = speculative_decode(suffix_config(tiny_dirs, suffix_model_below=16.0), prompt_ids=REPEATS, pair=tiny_pair)
    rows = round_drawing(trace, trace.rounds[0])["rows"]
    assert "Where each drafted token came from" in rows
    assert f"from the {FROM_PROMPT}" in rows and f"from the {FROM_DRAFT_MODEL}" in rows


@pytest.mark.slow  # a statistical test at its computed power: many samples
def test_suffix_and_draft_model_candidates_in_one_tree_keep_the_targets_law(tiny_dirs, tiny_pair):
    """At the first position the tree holds the draft model's sampled token and the prompt's suffix candidates (one-hot
    proposals): checked in turn against what the rejected siblings left (multi-step speculative sampling), the first
    token emitted is distributed as the target's p."""
    n = 500
    with torch.inference_mode():
        p = softmax32(tiny_pair.target.model(torch.tensor([REPEATS])).logits[0, -1])
        q = softmax32(tiny_pair.draft.model(torch.tensor([REPEATS])).logits[0, -1])
    assert chi_square_power(p, q, n, level=1e-6) > 0.999
    config = suffix_config(tiny_dirs, rule="sample", max_new_tokens=3, gamma=2, suffix_model_below=16.0)
    traces = [speculative_decode(config.replace(seed=s), prompt_ids=REPEATS, pair=tiny_pair) for s in range(n)]
    both = [{FROM_PROMPT, FROM_DRAFT_MODEL} <= {x.source for x in t.rounds[0].tree.nodes[1:]} for t in traces]
    assert sum(both) > n / 2  # mostly both sources side by side (a drawn token the suffix tree also holds is merged)
    firsts = [t.output_ids[0] for t in traces]
    assert goodness_of_fit(firsts, p) > 1e-3
    assert goodness_of_fit(firsts, q) < 1e-6  # the test has the power to see a wrong distribution


def test_the_compared_draft_of_a_suffix_round_is_its_leading_branch(tiny_dirs, tiny_pair):
    trace = speculative_decode(suffix_config(tiny_dirs, suffix_model_below=16.0), prompt_ids=REPEATS, pair=tiny_pair)
    rnd = next(r for r in trace.rounds if r.tree.nodes[1:])
    draft = compared_draft(rnd)
    firsts = [n for n in rnd.tree.nodes if n.parent == 0 and n.sibling_rank == 0]
    assert draft.token_ids[0] == firsts[0].token_id and len(draft.token_ids) == len(draft.texts)
    assert draft.by_model[0] == (firsts[0].source == FROM_DRAFT_MODEL)  # the model's chain is drafted first
    prefix = trace.prompt_ids + trace.output_ids[: rnd.prefix_len - len(trace.prompt_ids)]
    table = compare_rules_on_draft(trace.config, tiny_pair, prefix, draft.token_ids, draft.by_model)
    greedy = table[table["rule"] == table["rule"].iloc[0]]
    assert len(greedy) == len(draft.token_ids)


@pytest.mark.slow  # three pages of the app, each with its own run
def test_the_race_compare_and_gamma_sweep_pages_take_the_suffix_drafter(params):  # noqa: F811
    link = {**params, "drafter": "suffix"}
    at = open_page(link, "race")
    assert not at.error, [e.value for e in at.error]
    assert any("SuffixDecoding" in c.value for c in at.caption)  # its page says what it is made for
    press(at, "Measure the race on this server")
    assert not at.exception and not at.error and at.session_state["sv_config"].drafter == "suffix"
    assert len(at.metric) >= 2  # each lane's time: the race ran
    at = open_page(link, "compare_rules")
    press(at, "Check this draft with every rule")
    assert not at.exception and not at.error and len(at.get("plotly_chart")) == 1
    at = open_page(link, "gamma_sweep")
    at.multiselect[0].set_value([1, 2]).run()
    at.button[0].click().run()
    assert not at.exception and not at.error
    assert list(at.dataframe[0].value["γ"]) == [1, 2]


def test_a_long_match_still_speculates_as_deep_as_the_round_allows():
    """A context that repeats an earlier answer matches the longest pattern the trie keeps, and the levels kept below
    it still give the round's γ tokens of that answer (a trie cut at the match's own depth would give one)."""
    answer = [(7 * i) % 101 for i in range(128)]  # no pattern repeats within it
    history = ServerHistory()
    history.extend(0, answer)
    speculation = history.speculate([900, 901, *answer[:40]], SuffixSettings(), depth=5)
    assert [c.token for c in speculation.candidates] == answer[40:45]
    assert all(c.score == 1.0 for c in speculation.candidates) and speculation.expected == 5.0  # a copy: trusted
