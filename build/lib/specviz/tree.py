"""Recursive Speculative Decoding (Jeon et al. 2024, arXiv 2402.14160): draft trees, one-pass tree
verification, recursive rejection sampling among siblings.

Drafting (one draft forward per depth level, the seed's "draft iterations"):
  * RSD-C, constant branching: every node gets ``branching`` children drawn WITHOUT replacement from
    the draft's q at that node (Gumbel-top-k).
  * RSD-S, budgeted: Stochastic Beam Search (Kool et al. 2019) keeps the ``beam_width`` best
    Gumbel-perturbed paths per level, so the tree has at most beam_width nodes per level.
  With a deterministic rule (greedy, top-beta) the same shapes are drawn deterministically (top-k /
  beam search), since those rules never need q's randomness.

Verification: the target scores the root and EVERY node in a single forward pass, using a tree
attention mask (each node sees the committed prefix and its ancestors) and per-node position ids.

Recursive rejection sampling over siblings x_1..x_k of a node (drawn without replacement from q):
accept x_i with min(1, p_i(x_i) / q_i(x_i)); on rejection p_{i+1} = norm(max(0, p_i - q_i)) and
q_{i+1} = q_i with x_i removed and renormalised; if every sibling fails, the correction is drawn from
the last residual; an accepted node continues the walk at its own children; a fully accepted leaf
adds a bonus token from p. With one child per node this is exactly speculative sampling.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from .forwards import ForwardFn, KVCachedSequence, TreeLayout
from .models import LoadedModel
from .distributions import gumbel_top_k, residual_distribution
from .verify import Rule, Verdict



@dataclass
class TreeNode:
    index: int  # 0 is the root: the last committed token, not a draft
    parent: int  # -1 for the root
    depth: int  # the root is depth 0; a node drafted in iteration k has depth k
    token_id: int
    draft_prob: float  # q(token) at its parent (the distribution it was drawn from)
    sibling_rank: int  # draw order among its siblings (0 = drawn first)
    children: list[int] = field(default_factory=list)
    log_prob: float = 0.0  # log q of the path from the root (beam search's phi)
    perturbed: float = 0.0  # Gumbel-perturbed path score (stochastic beam search's G)


@dataclass
class DraftTree:
    nodes: list[TreeNode]
    levels: list[list[int]]  # node indices drafted in each iteration (depth 1, 2, ...)
    draft_probs: dict[int, torch.Tensor]  # node index -> q at that node (float32, CPU), for expanded nodes
    forward_passes: int = 0
    exit_threshold: float | None = None  # trees have no adaptive draft exit (a chain's DraftBlock may)

    def path_to(self, index: int) -> list[int]:
        """Node indices from depth 1 down to ``index``."""
        path = []
        while index > 0:
            path.append(index)
            index = self.nodes[index].parent
        return path[::-1]

    @property
    def size(self) -> int:
        return len(self.nodes) - 1  # drafted tokens (the root is not drafted)


def tree_attention(context_len: int, tail_len: int, tree: DraftTree, nodes: list[int], cache_index: dict[int, int],
                   cached: int) -> TreeLayout:
    """The layout for feeding ``tail_len`` chain tokens (the uncached end of the context, root last) and
    then ``nodes``: each node attends to the whole context and to its ancestors, at position
    context_len - 1 + depth. ``cache_index`` maps already-cached nodes to their cache column."""
    total = cached + tail_len + len(nodes)
    allowed = torch.zeros(tail_len + len(nodes), total, dtype=torch.bool)
    positions = []
    for i in range(tail_len):  # causal chain over the context tail
        allowed[i, : cached + i + 1] = True
        positions.append(cached + i)
    columns = dict(cache_index)
    for j, node in enumerate(nodes):
        row = tail_len + j
        columns[node] = cached + tail_len + j
        allowed[row, :context_len] = True
        for ancestor in tree.path_to(node):
            allowed[row, columns[ancestor]] = True
        positions.append(context_len - 1 + tree.nodes[node].depth)
    return TreeLayout(positions=positions, allowed=allowed)


def _children_constant(q: torch.Tensor, branching: int, stochastic: bool, generator: torch.Generator) -> list[int]:
    if stochastic:
        return gumbel_top_k(q, branching, generator)
    return [int(i) for i in torch.topk(q, min(branching, int((q > 0).sum()))).indices]


def _conditioned_gumbel(parent_score: float, child_keys: torch.Tensor) -> torch.Tensor:
    """Stochastic beam search (Kool et al. 2019, Eq. 5 in its numerically stable form): Gumbels of a
    node's children conditioned on their maximum being the parent's perturbed score."""
    top = child_keys.max()
    v = parent_score - child_keys + torch.log1p(-torch.exp(child_keys - top))
    return parent_score - torch.clamp(v, min=0) - torch.log1p(torch.exp(-v.abs()))


def _beam_children(tree: DraftTree, frontier: list[int], probs: dict[int, torch.Tensor], width: int, stochastic: bool,
                   generator: torch.Generator) -> list[tuple[int, int, float, float]]:
    """(parent, token, log_prob, perturbed) of the ``width`` best children over the whole frontier."""
    candidates = []
    for parent in frontier:
        node, q = tree.nodes[parent], probs[parent].double()
        log_probs = node.log_prob + torch.log(q)
        if stochastic:
            uniform01 = torch.rand(q.shape, generator=generator, dtype=torch.float64).clamp_(1e-300, 1.0)
            keys = _conditioned_gumbel(node.perturbed, log_probs - torch.log(-torch.log(uniform01)))
        else:
            keys = log_probs
        top = torch.topk(keys, min(width, int((q > 0).sum())))
        candidates += [(float(k), parent, int(t), float(log_probs[t])) for k, t in zip(top.values, top.indices)]
    candidates.sort(key=lambda c: -c[0])
    return [(parent, token, log_prob, key) for key, parent, token, log_prob in candidates[:width]]


@dataclass
class TreeDrafter:
    """Drafts a token tree, one draft forward pass per level, from a draft model or layer-skip draft."""

    loaded: LoadedModel
    forward: ForwardFn
    vocab_size: int
    mode: str = "constant"
    branching: int = 2
    depth: int = 3
    beam_width: int = 4
    kind: str = "tree"
    state: KVCachedSequence = field(init=False)

    def __post_init__(self) -> None:
        self.state = KVCachedSequence()
        self.cache_index: dict[int, int] = {}  # tree node -> its column in the draft's KV cache
        self.context_len = 0  # the committed context the last tree grew from

    def propose(self, context: list[int], max_depth: int, rule: Rule, generator: torch.Generator) -> DraftTree:
        """A tree of at most ``max_depth`` levels below the context's last token, one draft pass per level."""
        root = TreeNode(index=0, parent=-1, depth=0, token_id=context[-1], draft_prob=1.0, sibling_rank=0)
        tree = DraftTree(nodes=[root], levels=[], draft_probs={})
        self.cache_index = {}
        self.context_len = len(context)
        frontier = [0]
        for _ in range(min(self.depth, max_depth)):
            self._score(tree, frontier, context, rule)
            frontier = self._expand(tree, frontier, rule, generator)
            tree.levels.append(frontier)
        return tree

    def _score(self, tree: DraftTree, frontier: list[int], context: list[int], rule: Rule) -> None:
        """One draft forward over the frontier (the context tail first, in the first iteration)."""
        if frontier == [0]:
            logits = self.state.feed(self.forward, self.loaded, self.state.pending(context), 1)
        else:
            cached = len(self.state.ids)
            layout = tree_attention(len(context), 0, tree, frontier, self.cache_index, cached)
            logits = self.state.feed(self.forward, self.loaded, [tree.nodes[i].token_id for i in frontier],
                                     len(frontier), layout)
            self.cache_index.update({node: cached + j for j, node in enumerate(frontier)})
        tree.forward_passes += 1
        for node, row in zip(frontier, logits):
            tree.draft_probs[node] = rule.draft_distribution(row[: self.vocab_size]).cpu()

    def _expand(self, tree: DraftTree, frontier: list[int], rule: Rule, generator: torch.Generator) -> list[int]:
        if self.mode == "constant":
            chosen = []
            for parent in frontier:
                q = tree.draft_probs[parent]
                chosen += [(parent, t, tree.nodes[parent].log_prob + math.log(float(q[t])), 0.0)
                           for t in _children_constant(q, self.branching, rule.stochastic, generator)]
        else:
            chosen = _beam_children(tree, frontier, tree.draft_probs, self.beam_width, rule.stochastic, generator)
        added = []
        for parent, token, log_prob, perturbed in chosen:
            node = TreeNode(index=len(tree.nodes), parent=parent, depth=tree.nodes[parent].depth + 1, token_id=token,
                            draft_prob=float(tree.draft_probs[parent][token]),
                            sibling_rank=len(tree.nodes[parent].children), log_prob=log_prob, perturbed=perturbed)
            tree.nodes[parent].children.append(node.index)
            tree.nodes.append(node)
            added.append(node.index)
        return added

    def update(self, drafted: int, accepted_path: list[int]) -> None:
        """Keep the committed context and the accepted path's cached nodes; drop the rest of the tree."""
        kept = list(range(min(self.context_len, len(self.state.ids))))  # fewer when this round drafted nothing
        for node in accepted_path:
            if node not in self.cache_index:
                break
            kept.append(self.cache_index[node])
        self.state.keep(kept)


def score_tree(state: KVCachedSequence, forward: ForwardFn, loaded: LoadedModel, context: list[int],
               tree: DraftTree, vocab_size: int) -> torch.Tensor:
    """ONE target forward over the uncached context tail and every tree node: logits (1 + nodes, V),
    row 0 at the root, row j at node j."""
    tail = state.pending(context)
    cached = len(state.ids)
    nodes = list(range(1, len(tree.nodes)))
    layout = tree_attention(len(context), len(tail), tree, nodes, {}, cached)
    logits = state.feed(forward, loaded, tail + [tree.nodes[i].token_id for i in nodes], 1 + len(nodes), layout)
    return logits[:, :vocab_size]


def remove_and_renormalise(draft_probs: torch.Tensor, token: int) -> torch.Tensor:
    """q with a drawn sibling removed: the distribution of the next draw without replacement."""
    rest = draft_probs.clone()
    rest[token] = 0.0
    total = rest.sum()
    return rest / total if total > 0 else rest


@dataclass
class SiblingCheck:
    """One step of the recursive rejection walk."""

    parent: int
    node: int
    token_id: int
    target_probs: torch.Tensor  # p_i at this step
    draft_probs: torch.Tensor  # q_i at this step
    verdict: Verdict


def recursive_rejection(tree: DraftTree, target_probs: list[torch.Tensor], rule: Rule, generator: torch.Generator):
    """Walk the tree from the root with the rule; return (checks, accepted path, final p, leaf).

    For the sampling rule the per-sibling distributions follow RSD's recursion (p_{i+1} residual,
    q_{i+1} without x_i); deterministic rules check every sibling against the node's own p. The token
    after the path is ``rule.bonus(final p)``: a sample from the last residual (or from p at an
    accepted leaf) for sampling, the target's argmax for the deterministic rules. ``leaf`` is True
    when the walk ended at an accepted node without children (a bonus token).
    """
    checks: list[SiblingCheck] = []
    path: list[int] = []
    node = 0
    while True:
        p_i, q_i = target_probs[node], tree.draft_probs.get(node)
        children = tree.nodes[node].children
        if not children:
            return checks, path, p_i, True
        accepted = None
        for child in children:
            token = tree.nodes[child].token_id
            verdict = rule.check(token, p_i, q_i, generator)
            checks.append(SiblingCheck(node, child, token, p_i, q_i, verdict))
            if verdict.accepted:
                accepted = child
                break
            if rule.stochastic:
                p_i, q_i = _residual_step(p_i, q_i, token)
        if accepted is None:
            return checks, path, p_i, False
        path.append(accepted)
        node = accepted


def _residual_step(p_i: torch.Tensor, q_i: torch.Tensor, token: int) -> tuple[torch.Tensor, torch.Tensor]:
    return residual_distribution(p_i, q_i), remove_and_renormalise(q_i, token)
