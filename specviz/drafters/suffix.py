"""SuffixDecoding (Oliaro et al., NeurIPS 2025, arXiv 2411.04975): a drafter that reads almost nothing.

Each round it looks the end of the text up in two suffix trees (:mod:`specviz.drafters.suffix_tree`): one over the
prompt and the answer so far (prompt lookup, Saxena 2023, grown into a tree) and one over every answer this server
produced before (the paper's global tree), and proposes the better of their speculation trees, sized by the length of
the match and pruned by the frequency of each path. Where the better one is unsure (it expects fewer accepted tokens
than ``suffix_model_below``, its path probabilities summed and discounted by the share of the longest pattern matched)
and the pair has a draft model, the draft model's γ-token chain joins the same tree, so the target verifies every
candidate, from every source, in ONE pass (tree attention, as for RSD's trees).

Exactness: the children of a node are checked in turn, each against the target's p left over by the siblings rejected
before it (SpecInfer's multi-step speculative sampling, Miao et al. 2024): a child from a suffix tree is a
deterministic proposal, its q one-hot, so it is accepted with probability p'(x) and p' then loses x; the draft model's
child was drawn from its own q, independently of the others. Greedy accepts the argmax wherever it is. The class's
repeated prompts are exactly the workload the paper made it for: the second student's answer is the first's.
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass, field

import torch

from specviz.drafters.base import AutoregressiveDrafter, ConfidenceExit, DraftBlock, DraftTree, TreeNode
from specviz.drafters.model import draft_source
from specviz.drafters.suffix_tree import Candidate, Speculation, SuffixTrie
from specviz.models.pair import ModelPair
from specviz.registry.drafter_settings import DraftModelSettings, SuffixSettings
from specviz.registry.shared_settings import DrafterShared
from specviz.rules.acceptance import Rule
from specviz.rules.distributions import one_hot
from specviz.runtime.protocol import KVCachedSequence
from specviz.runtime.skipping_forward import has_mixed_attention, sliding_window
from specviz.settings import ConfigError

# where a drafted token came from, as the round view names it
FROM_PROMPT, FROM_HISTORY, FROM_DRAFT_MODEL = "prompt", "suffix tree", "draft model"
LONGEST_PATTERN, SPECULATED_LEVELS = 12, 16  # a match's tokens, and the levels kept below it (the paper: 64 in all)
HISTORY_TOKENS = 20_000  # the earlier answers a server keeps indexed, about a class's (then it starts again)


def suffix_trie() -> SuffixTrie:
    return SuffixTrie(LONGEST_PATTERN, LONGEST_PATTERN + SPECULATED_LEVELS)


@dataclass
class ServerHistory:
    """The answers this server produced, for one target, in one suffix tree shared by every run (and so every
    session): the paper's global tree, guarded by a lock (runs of several sessions read and extend it)."""

    trie: SuffixTrie = field(default_factory=suffix_trie)
    lock: threading.Lock = field(default_factory=threading.Lock)
    runs: itertools.count = field(default_factory=itertools.count)

    def extend(self, run: int, tokens: list[int]) -> None:
        with self.lock:
            if self.trie.tokens + len(tokens) > HISTORY_TOKENS:
                self.trie = suffix_trie()  # bounded memory: the oldest answers go
            self.trie.extend(run, tokens)

    def speculate(self, context: list[int], settings: SuffixSettings, depth: int) -> Speculation:
        with self.lock:
            return speculate(self.trie, context, settings, depth)


HISTORIES: dict[str, ServerHistory] = {}  # target name -> its answers
HISTORIES_LOCK = threading.Lock()


def server_history(target: str) -> ServerHistory:
    """This process's history of answers for ``target`` (made on first use)."""
    with HISTORIES_LOCK:
        return HISTORIES.setdefault(target, ServerHistory())


def speculate(trie: SuffixTrie, context: list[int], settings: SuffixSettings, depth: int) -> Speculation:
    """A suffix tree's speculation tree after ``context``, at most ``depth`` levels, sized by the settings."""
    return trie.speculate(context, settings.suffix_alpha, settings.suffix_nodes, depth, settings.suffix_floor)


@dataclass
class SuffixDrafter:
    """SuffixDecoding's drafter: suffix trees over the text and this server's answers, the draft model's chain where
    they are unsure, one tree."""

    vocab_size: int
    settings: SuffixSettings
    history: ServerHistory | None  # None: this run looks up its own text only
    model: AutoregressiveDrafter | None  # the pair's draft model, where it joins
    own: SuffixTrie = field(default_factory=suffix_trie)
    indexed: int = 0  # the context's tokens in ``own`` so far
    prompt_length: int | None = None
    run: int = 0  # this run's sequence in the history

    def __post_init__(self) -> None:
        self.run = next(self.history.runs) if self.history else 0

    def propose(self, context: list[int], gamma: int, rule: Rule, generator: torch.Generator) -> DraftTree:
        """The round's tree: the better suffix tree's candidates, best first, a candidate the tree holds already
        merged into it; where that tree is unsure, the draft model's chain first and then only as many suffix
        candidates as the tree expects accepted (every node costs the target a position in its pass)."""
        self._index(context)
        speculation, source = self._best_speculation(context, gamma)
        tree = DraftTree(nodes=[TreeNode(0, -1, 0, context[-1], 1.0, 0)], levels=[], draft_probs={})
        candidates = speculation.candidates
        if self.model and gamma and speculation.expected < self.settings.suffix_model_below:
            add_chain(tree, self.model.propose(context, gamma, rule, generator))
            candidates = candidates[: int(speculation.expected)]  # beside it, the suffix nodes they expect accepted
        add_candidates(tree, candidates, source, self.vocab_size)
        return tree

    def _index(self, context: list[int]) -> None:
        """Add the tokens committed since the last round to the run's own suffix tree and, past the prompt, to the
        server's answers (an answer's last round is not added: no round follows it)."""
        if self.prompt_length is None:
            self.prompt_length = len(context)
        new = context[self.indexed :]
        self.own.extend("text", new)
        if self.history:
            self.history.extend(self.run, context[max(self.indexed, self.prompt_length) :])
        self.indexed = len(context)

    def _best_speculation(self, context: list[int], depth: int) -> tuple[Speculation, str]:
        """The speculation tree expecting more accepted tokens: the text's own, or the server's answers'."""
        own = speculate(self.own, context, self.settings, depth), FROM_PROMPT
        if not self.history:
            return own
        earlier = self.history.speculate(context, self.settings, depth), FROM_HISTORY
        return max(own, earlier, key=lambda found: found[0].expected)

    def update(self, drafted: int, accepted_path: list[int]) -> None:
        """Nothing to learn: the draft model's confidence exit is fixed, and its cache catches up with the text the
        next time it drafts (:meth:`~specviz.runtime.protocol.KVCachedSequence.pending`)."""


def add_node(tree: DraftTree, parent: int, token: int, drawn_from: torch.Tensor, source: str) -> int:
    """A child of ``parent`` drawn from ``drawn_from`` alone (its own q, independent of its siblings); its index."""
    node = TreeNode(
        index=len(tree.nodes),
        parent=parent,
        depth=tree.nodes[parent].depth + 1,
        token_id=token,
        draft_prob=float(drawn_from[token]),
        sibling_rank=len(tree.nodes[parent].children),
        source=source,
    )
    tree.nodes[parent].children.append(node.index)
    tree.nodes.append(node)
    tree.drawn_from[node.index] = drawn_from
    if node.depth > len(tree.levels):
        tree.levels.append([])
    tree.levels[node.depth - 1].append(node.index)
    return node.index


def add_chain(tree: DraftTree, block: DraftBlock) -> None:
    """The draft model's chain as the tree's first branch, each token with the q it was drawn from (also the q
    recorded at its parent, as a tree drafted by the model records it)."""
    tree.forward_passes += block.forward_passes
    node = 0
    for token, q in zip(block.token_ids, block.draft_probs):
        tree.draft_probs[node] = q
        node = add_node(tree, node, token, q, FROM_DRAFT_MODEL)


def add_candidates(tree: DraftTree, candidates: list[Candidate], source: str, vocab_size: int) -> None:
    """A suffix tree's candidates, each a deterministic proposal (q one-hot); one the tree already holds (the same
    token after the same node: the draft model drew it) is merged, so its children hang below the one node."""
    nodes: list[int] = []
    for candidate in candidates:
        parent = 0 if candidate.parent < 0 else nodes[candidate.parent]
        same = [c for c in tree.nodes[parent].children if tree.nodes[c].token_id == candidate.token]
        nodes.append(
            same[0] if same else add_node(tree, parent, candidate.token, one_hot(candidate.token, vocab_size), source)
        )


def build(
    settings: SuffixSettings, shared: DrafterShared, pair: ModelPair, target_state: KVCachedSequence | None
) -> SuffixDrafter:
    """The suffix drafter, with the pair's draft model (its confidence exit from the draft model's group) where the
    pair has one and the settings let it join."""
    if sliding_window(pair.target.model.config) or has_mixed_attention(pair.target.model.config):
        raise ConfigError(
            f"The suffix drafter verifies a tree: {pair.target.name} attends through a sliding window, which a tree's "
            "attention mask does not model. Use the n-gram drafter (prompt lookup) with this model."
        )
    model = None
    if pair.draft and settings.suffix_model_below > 0:
        exit_at = shared.group(DraftModelSettings).confidence_exit
        model = AutoregressiveDrafter(
            *draft_source(None, shared, pair), pair.vocab_size, ConfidenceExit(exit_at) if exit_at > 0 else None
        )
    history = server_history(pair.target.name) if settings.suffix_history else None
    return SuffixDrafter(pair.vocab_size, settings, history, model)
