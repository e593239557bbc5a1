"""The verification decision on hand-made p and q (no model): what ``decide_chain`` and ``decide_tree`` accept, and
the correction or bonus they emit; each expected outcome is worked out in a comment."""

import torch

from specviz.drafters.base import DraftTree, TreeNode
from specviz.engine.verification import decide_chain, decide_tree
from specviz.rules.acceptance import RESIDUAL, TARGET
from specviz.rules.distributions import one_hot
from specviz.rules.greedy import GreedyRule
from specviz.rules.sampling import SpeculativeSamplingRule

V = 5  # vocabulary


def peaked(token: int) -> torch.Tensor:
    """A distribution (V,) whose argmax is ``token`` (0.6 there, 0.1 elsewhere)."""
    return torch.full((V,), 0.1).index_fill(0, torch.tensor([token]), 0.6)


def tree_of(parents: list[int], tokens: list[int], draft_probs: dict[int, torch.Tensor]) -> DraftTree:
    """A tree from each node's parent and token (node 0 the root, its parent -1)."""
    nodes = []
    for index, (parent, token) in enumerate(zip(parents, tokens)):
        depth = 0 if parent < 0 else nodes[parent].depth + 1
        rank = 0 if parent < 0 else len(nodes[parent].children)
        nodes.append(TreeNode(index, parent, depth, token, 1.0, rank))
        if parent >= 0:
            nodes[parent].children.append(index)
    levels = [[n.index for n in nodes if n.depth == d] for d in range(1, max(n.depth for n in nodes) + 1)]
    return DraftTree(nodes, levels, draft_probs)


def test_greedy_chain_accepts_up_to_the_first_disagreement_then_corrects_with_argmax_p():
    # drafted 1, 2, 3; the target's argmax is 1, 2, then 4: two accepted, the correction argmax p_2 = 4
    target = [peaked(1), peaked(2), peaked(4), peaked(0)]
    draft = [peaked(1), peaked(2), peaked(3)]
    decision = decide_chain([1, 2, 3], target, draft, GreedyRule(), torch.Generator())
    assert decision.accepted_path == [1, 2]
    assert (decision.token_id, decision.source, decision.corrected) == (4, TARGET, True)
    assert [c.verdict.accepted for c in decision.checks] == [True, True, False]
    assert decision.checks[-1].target_probs is target[2]  # the correction's p: the rejected position's


def test_greedy_chain_stops_checking_at_the_first_rejection():
    # the first token is already wrong: the later ones are never checked
    target, draft = [peaked(1), peaked(2), peaked(0)], [peaked(3), peaked(2)]
    decision = decide_chain([3, 2], target, draft, GreedyRule(), torch.Generator())
    assert len(decision.checks) == 1 and decision.accepted_path == []
    assert decision.token_id == 1  # argmax p_0


def test_greedy_chain_fully_accepted_emits_the_bonus_from_p_after_the_last_token():
    target = [peaked(1), peaked(2), peaked(3), peaked(4)]
    decision = decide_chain([1, 2, 3], target, [peaked(0)] * 3, GreedyRule(), torch.Generator())
    assert decision.accepted_path == [1, 2, 3]
    assert (decision.token_id, decision.source, decision.corrected) == (4, TARGET, False)  # argmax p_3


def test_an_empty_chain_emits_the_bonus_from_p_after_the_prefix():
    decision = decide_chain([], [peaked(2)], [], GreedyRule(), torch.Generator())
    assert (decision.checks, decision.accepted_path, decision.token_id, decision.corrected) == ([], [], 2, False)


def test_speculative_sampling_with_q_equal_to_p_accepts_every_token():
    # min(1, p/q) = 1 and u < 1: every drafted token is accepted whatever the draws
    gen = torch.Generator().manual_seed(3)
    for _ in range(20):
        probs = [torch.softmax(torch.randn(V, generator=gen), -1) for _ in range(4)]
        tokens = [int(torch.multinomial(p, 1, generator=gen)) for p in probs[:3]]
        decision = decide_chain(tokens, probs, probs[:3], SpeculativeSamplingRule(), gen)
        assert decision.accepted_path == [1, 2, 3] and not decision.corrected
        assert [c.verdict.accept_prob for c in decision.checks] == [1.0, 1.0, 1.0]


def test_speculative_sampling_rejects_a_token_p_never_emits_and_resamples_from_the_residual():
    # p is one-hot on 4, which q never drafts; drafted 0 has p(0) = 0: accept prob 0, so rejected, and the residual
    # norm(max(0, p - q)) is one-hot on 4: the correction is 4, drawn from the residual
    p, q = one_hot(4, V), torch.tensor([0.5, 0.5, 0.0, 0.0, 0.0])
    decision = decide_chain([0], [p, p], [q], SpeculativeSamplingRule(), torch.Generator().manual_seed(0))
    assert decision.checks[0].verdict.accept_prob == 0.0
    assert (decision.accepted_path, decision.token_id, decision.source, decision.corrected) == ([], 4, RESIDUAL, True)


def test_the_chain_decision_draws_the_checks_then_the_correction_in_order():
    """The generator's draws: one uniform per check, left to right, then the correction's; replayed by hand from
    the same seed they give the same verdicts, the same token and leave the generator in the same state."""
    rule, setup = SpeculativeSamplingRule(), torch.Generator().manual_seed(11)
    for seed in range(30):
        target = [torch.softmax(2 * torch.randn(V, generator=setup), -1) for _ in range(4)]
        draft = [torch.softmax(2 * torch.randn(V, generator=setup), -1) for _ in range(3)]
        tokens = [int(torch.multinomial(q, 1, generator=setup)) for q in draft]
        decided, replay = torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed)
        decision = decide_chain(tokens, target, draft, rule, decided)
        verdicts = []
        for token, p, q in zip(tokens, target, draft):
            verdicts.append(rule.check(token, p, q, replay))
            if not verdicts[-1].accepted:
                extra = rule.correction(p, q, replay)
                break
        else:
            extra = rule.bonus(target[3], replay)
        assert [c.verdict for c in decision.checks] == verdicts
        assert decision.token_id == extra
        assert torch.equal(decided.get_state(), replay.get_state())


def test_greedy_tree_keeps_the_accepted_sibling_and_emits_the_bonus_at_its_leaf():
    # root -> children 1 (token 3) and 2 (token 2); the target wants 2 after the root: node 1 rejected, node 2
    # accepted; node 2 is a leaf, so the bonus is argmax p at node 2 = 0
    tree = tree_of([-1, 0, 0], [4, 3, 2], {0: peaked(3)})
    decision = decide_tree(tree, [peaked(2), peaked(1), peaked(0)], GreedyRule(), torch.Generator())
    assert [(c.parent, c.node, c.verdict.accepted) for c in decision.checks] == [(0, 1, False), (0, 2, True)]
    assert decision.accepted_path == [2]
    assert (decision.token_id, decision.source, decision.corrected) == (0, TARGET, False)


def test_sampling_tree_with_every_sibling_rejected_corrects_from_the_last_residual():
    # p is one-hot on 4; the siblings 0 and 1 have p = 0: both rejected; RSD's p after them stays one-hot on 4 and
    # the last residual is one-hot on 4, so the correction is 4 (and the walk checked both siblings)
    q = torch.tensor([0.5, 0.5, 0.0, 0.0, 0.0])
    tree = tree_of([-1, 0, 0], [2, 0, 1], {0: q})
    target = [one_hot(4, V), peaked(0), peaked(1)]
    decision = decide_tree(tree, target, SpeculativeSamplingRule(), torch.Generator().manual_seed(0))
    assert [c.node for c in decision.checks] == [1, 2] and decision.accepted_path == []
    assert (decision.token_id, decision.source, decision.corrected) == (4, RESIDUAL, True)


def test_a_chain_decided_as_a_one_child_tree_is_the_same_decision():
    """A chain is a tree with one child per node: both walks make the same checks with the same draws."""
    rule, setup = SpeculativeSamplingRule(), torch.Generator().manual_seed(7)
    for seed in range(30):
        target = [torch.softmax(2 * torch.randn(V, generator=setup), -1) for _ in range(4)]
        draft = [torch.softmax(2 * torch.randn(V, generator=setup), -1) for _ in range(3)]
        tokens = [int(torch.multinomial(q, 1, generator=setup)) for q in draft]
        tree = tree_of([-1, 0, 1, 2], [0, *tokens], dict(enumerate(draft)))
        chain = decide_chain(tokens, target, draft, rule, torch.Generator().manual_seed(seed))
        as_tree = decide_tree(tree, target, rule, torch.Generator().manual_seed(seed))
        assert [c.verdict for c in chain.checks] == [c.verdict for c in as_tree.checks]
        assert (chain.accepted_path, chain.token_id, chain.source) == (
            as_tree.accepted_path,
            as_tree.token_id,
            as_tree.source,
        )
