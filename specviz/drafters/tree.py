"""Recursive Speculative Decoding (Jeon et al. 2024, arXiv 2402.14160): draft trees, one-pass tree
verification, recursive rejection sampling among siblings.

Drafting (one draft forward per depth level, the seed's "draft iterations"):
  * RSD-C, constant branching: every node gets ``branching`` children drawn WITHOUT replacement from
    the draft's q at that node (Gumbel-top-k).
  * RSD-S, budgeted: Stochastic Beam Search (Kool et al. 2019) keeps the ``beam_width`` best
    Gumbel-perturbed paths per level, so the tree has at most beam_width nodes per level.
  * RSD-S sized to the flat pass: the same beam, as wide as keeps depth x width inside the target's flat region
    (its profile's v(k) <= 1.25), so the whole tree costs about one verification step. The flat region is the
    config's ``flat_block``, measured once where the config was made
    (:func:`~specviz.drafters.modules.on_this_machine`), so a link draws the same tree on every machine.
  With a deterministic rule (greedy, top-beta) the same shapes are drawn deterministically (top-k /
  beam search), since those rules never need q's randomness.

The target scores the whole tree in one pass with :func:`tree_attention`'s mask and walks it with
recursive rejection sampling (:mod:`specviz.engine.verification`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from specviz.drafters import layerskip, model
from specviz.drafters.base import DraftTree, TreeNode
from specviz.models.loading import LoadedModel
from specviz.models.pair import ModelPair
from specviz.registry.drafter_settings import LayerSkipSettings, TreeSettings
from specviz.registry.shared_settings import DrafterShared
from specviz.rules.acceptance import Rule
from specviz.rules.distributions import gumbel_top_k
from specviz.runtime.protocol import ForwardFn, KVCachedSequence, TreeLayout
from specviz.runtime.skipping_forward import has_mixed_attention, sliding_window
from specviz.settings import ConfigError


def tree_attention(
    context_len: int, tail_len: int, tree: DraftTree, nodes: list[int], cache_index: dict[int, int], cached: int
) -> TreeLayout:
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


def grow_node(tree: DraftTree, parent: int, token: int, log_prob: float, perturbed: float) -> int:
    """Add ``token`` as the next child of node ``parent`` (its draft probability read from the parent's q, its
    sibling rank the children before it); returns the new node's index."""
    node = TreeNode(
        index=len(tree.nodes),
        parent=parent,
        depth=tree.nodes[parent].depth + 1,
        token_id=token,
        draft_prob=float(tree.draft_probs[parent][token]),
        sibling_rank=len(tree.nodes[parent].children),
        log_prob=log_prob,
        perturbed=perturbed,
    )
    tree.nodes[parent].children.append(node.index)
    tree.nodes.append(node)
    return node.index


def beam_children(
    tree: DraftTree,
    frontier: list[int],
    probs: dict[int, torch.Tensor],
    width: int,
    stochastic: bool,
    generator: torch.Generator,
) -> list[tuple[int, int, float, float]]:
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
    shape: TreeSettings = field(default_factory=TreeSettings)
    depth: int = 3
    width: int = 1  # a beam tree's nodes per level (RSD-S: the setting; flat: from the config's flat block)
    state: KVCachedSequence = field(init=False)

    def __post_init__(self) -> None:
        self.state = KVCachedSequence()
        self.cache_index: dict[int, int] = {}  # tree node -> its column in the draft's KV cache
        self.context_len = 0  # the committed context the last tree grew from

    def propose(self, context: list[int], gamma: int, rule: Rule, generator: torch.Generator) -> DraftTree:
        """A tree of at most ``gamma`` levels below the context's last token, one draft pass per level."""
        root = TreeNode(index=0, parent=-1, depth=0, token_id=context[-1], draft_prob=1.0, sibling_rank=0)
        tree = DraftTree(nodes=[root], levels=[], draft_probs={})
        self.cache_index = {}
        self.context_len = len(context)
        frontier = [0]
        for _ in range(min(self.depth, gamma)):
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
            logits = self.state.feed(
                self.forward, self.loaded, [tree.nodes[i].token_id for i in frontier], len(frontier), layout
            )
            self.cache_index.update({node: cached + j for j, node in enumerate(frontier)})
        tree.forward_passes += 1
        for node, row in zip(frontier, logits):
            tree.draft_probs[node] = rule.draft_distribution(row[: self.vocab_size]).cpu()

    def _expand(self, tree: DraftTree, frontier: list[int], rule: Rule, generator: torch.Generator) -> list[int]:
        if self.shape.tree_mode == "constant":
            chosen = []
            for parent in frontier:
                q = tree.draft_probs[parent]
                chosen += [
                    (parent, t, tree.nodes[parent].log_prob + math.log(float(q[t])), 0.0)
                    for t in _children_constant(q, self.shape.branching, rule.stochastic, generator)
                ]
        else:
            chosen = beam_children(tree, frontier, tree.draft_probs, self.width, rule.stochastic, generator)
        return [grow_node(tree, parent, token, log_prob, perturbed) for parent, token, log_prob, perturbed in chosen]

    def update(self, drafted: int, accepted_path: list[int]) -> None:
        """Keep the committed context and the accepted path's cached nodes; drop the rest of the tree."""
        kept = list(range(min(self.context_len, len(self.state.ids))))  # fewer when this round drafted nothing
        for node in accepted_path:
            if node not in self.cache_index:
                break
            kept.append(self.cache_index[node])
        self.state.keep(kept)


def build(
    settings: TreeSettings, shared: DrafterShared, pair: ModelPair, target_state: KVCachedSequence | None
) -> TreeDrafter:
    """RSD's tree, drafted by the draft model when the pair has one, else the layer-skip self-draft (with the
    layer-skip group's layers: the tree's entry reads that group too); a flat tree as wide as its group's flat block
    allows (resolved where the config was made: never this machine's profile)."""
    if sliding_window(pair.target.model.config) or has_mixed_attention(pair.target.model.config):
        raise ConfigError(
            f"The tree drafter needs full attention: {pair.target.name} attends through a sliding "
            "window, which a tree's attention mask does not model. Use a chain drafter with this model."
        )
    if pair.draft:
        source, forward = model.draft_source(None, shared, pair)
    else:
        source, forward = layerskip.draft_source(shared.group(LayerSkipSettings), shared, pair)
    if settings.unresolved():
        raise ConfigError(
            "A flat tree's block is measured where its config is made (engine.loop.speculative_decode and the app "
            "do it): pass flat_block, or resolve the config with drafters.modules.on_this_machine"
        )
    width = settings.flat_width(shared.tree_depth) if settings.tree_mode == "flat" else settings.beam_width
    return TreeDrafter(source, forward, pair.vocab_size, settings, shared.tree_depth, width)
