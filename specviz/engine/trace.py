"""The trace: typed records of every round, the only thing pages and figures read.

Every quantity a figure shows is its own field here (probabilities, draws, verdicts), so the UI
never recomputes math. A trace round-trips through JSON without loss (``Trace.from_json``).
Timings are measurements, not results: ``without_timings`` zeroes them for byte-wise comparison.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Literal

from specviz.config import DecodeConfig

DraftStatus = Literal["accepted", "rejected", "not_verified"]  # a drafted token or tree node, as its check left it
ACCEPTED: DraftStatus = "accepted"
REJECTED: DraftStatus = "rejected"
NOT_VERIFIED: DraftStatus = "not_verified"  # after the first rejection: never checked


@dataclass
class TopTokens:
    """The N most likely tokens of one distribution, most likely first."""

    ids: list[int]
    texts: list[str]
    probs: list[float]


@dataclass
class DraftPosition:
    """One drafted token and everything the target's check of it produced."""

    index: int  # 0-based position in the round's draft block
    token_id: int
    text: str
    p: float  # target probability of the drafted token
    q: float  # draft probability of the drafted token (the q it was drawn from)
    accept_prob: float  # min(1, p/q) for sampling; 1/0 for the deterministic rules
    uniform: float | None  # the draw u (speculative sampling only)
    status: DraftStatus
    overlap: float  # sum_x min(p(x), q(x)): what speculative sampling would accept here
    alpha: (
        float  # the probability THIS round's rule accepts a fresh draft here (rules.acceptance.Rule.acceptance_alpha)
    )
    target_top: TopTokens
    draft_top: TopTokens
    candidates: TopTokens | None = None  # top-beta: the target's beta best tokens
    tau_gap: float | None = None  # top-beta: log p(top1) - log p(token)

    @property
    def accepted(self) -> bool:
        return self.status == ACCEPTED


@dataclass
class EmittedToken:
    """A token the target emitted itself: the correction after a rejection, or the bonus token."""

    token_id: int
    text: str
    prob: float  # its probability under ``source``
    target_prob: float  # its probability under the target's p
    source: str  # "residual" (norm(max(0, p - q))) or "target" (p)
    distribution_top: TopTokens  # top-N of the distribution it was taken from
    target_top: TopTokens  # top-N of the target's p at this position
    residual_top: TopTokens | None = None  # corrections: top-N of norm(max(0, p - q)), whatever the rule
    residual_p: list[float] | None = None  # p(x) at the rejected check, for each token of residual_top
    residual_q: list[float] | None = None  # q(x) there: its residual share is max(0, p(x) - q(x))


@dataclass
class TreeNodeRecord:
    """One node of a draft tree (node 0 is the root: the last committed token)."""

    index: int
    parent: int  # -1 for the root
    depth: int
    token_id: int
    text: str
    q: float  # q(token) at its parent: the distribution it was drawn from
    sibling_rank: int  # draw order among siblings
    status: DraftStatus
    draft_top: TopTokens | None  # q at this node (its children's distribution), when it was expanded
    target_top: TopTokens  # p at this node, from the one tree-verification pass
    source: str = ""  # where it came from, in a tree of several sources (the suffix drafter's)


@dataclass
class TreeRecord:
    """A Recursive Speculative Decoding round (Jeon et al. 2024): the tree, its iterations, the walk."""

    nodes: list[TreeNodeRecord]
    levels: list[list[int]]  # node indices drafted per draft iteration
    path: list[int]  # accepted nodes, root's child first
    check_nodes: list[int]  # node checked by each entry of Round.draft, in walk order
    residual_tops: list[TopTokens | None]  # after each rejected check: top-N of p_{i+1} = norm(max(0, p_i - q_i))


@dataclass
class Round:
    index: int
    prefix_len: int  # tokens (prompt + output so far) before this round
    draft: list[DraftPosition]
    correction: EmittedToken | None
    bonus: EmittedToken | None
    emitted_ids: list[int]
    emitted_texts: list[str]
    draft_ms: float
    verify_ms: float
    draft_forward_passes: int
    target_forward_passes: int
    target_positions: int  # positions scored by the one target pass (drafted + 1)
    target_pass_ms: float = 0.0  # of verify_ms: the target's pass and its p's; the rest checks and records the round
    exit_threshold: float | None = None  # layer-skip adaptive exit threshold in force
    tree: TreeRecord | None = None  # tree drafter: the whole tree; ``draft`` then lists the sibling checks
    ended_ms: float = 0.0  # when its tokens were committed, in ms since the decoding loop began (the race's clock)

    @property
    def drafted_count(self) -> int:
        return len(self.tree.nodes) - 1 if self.tree else len(self.draft)

    @property
    def accepted_count(self) -> int:
        return sum(pos.accepted for pos in self.draft)

    @property
    def realised_block(self) -> int:
        """The most tokens this round could accept (its realised block size k_r): a chain's drafted tokens, a tree's
        depth (its longest path)."""
        return max((n.depth for n in self.tree.nodes), default=0) if self.tree else len(self.draft)


@dataclass
class Stats:
    rounds: int
    new_tokens: int
    drafted_tokens: int
    accepted_tokens: int
    acceptance_rate: float  # accepted / drafted
    mean_tokens_per_round: float
    target_forward_passes: int
    draft_forward_passes: int
    autoregressive_forward_passes: int  # what plain decoding would need: one per new token
    alpha_estimate: float  # mean over verified positions of the rule's own alpha (DraftPosition.alpha)
    mean_acceptance_length: float  # vLLM's: 1 + accepted drafted tokens per drafting round
    stop_reason: str  # eos | max_new_tokens | context
    wall_ms: float
    tokens_per_s: float


@dataclass
class Trace:
    config: DecodeConfig  # everything that determined it (with the prompt)
    models: dict  # names of target / draft, device, dtype
    prompt_text: str | None
    prompt_ids: list[int]
    prompt_tokens: list[str]
    output_ids: list[int]  # new tokens only
    output_text: str
    rounds: list[Round] = field(default_factory=list)
    stats: Stats | None = None

    def to_dict(self) -> dict[str, Any]:
        """The trace as JSON-ready data (its config by flat setting names, :meth:`DecodeConfig.to_dict`)."""
        return {**dataclasses.asdict(self), "config": self.config.to_dict()}

    def to_json(self, indent: int | None = None) -> str:
        return json.dumps(self.to_dict(), indent=indent, ensure_ascii=False)

    @classmethod
    def from_dict(cls, data: dict) -> "Trace":
        return _build(cls, data)

    @classmethod
    def from_json(cls, text: str) -> "Trace":
        return cls.from_dict(json.loads(text))

    def without_timings(self) -> "Trace":
        """A copy whose measured times are zero: equal configs and seeds give equal copies."""
        rounds = [
            dataclasses.replace(r, draft_ms=0.0, verify_ms=0.0, target_pass_ms=0.0, ended_ms=0.0) for r in self.rounds
        ]
        stats = dataclasses.replace(self.stats, wall_ms=0.0, tokens_per_s=0.0) if self.stats else None
        return dataclasses.replace(self, rounds=rounds, stats=stats)


def _build(tp: object, data: Any) -> Any:
    """Rebuild a value of annotated type ``tp`` from its JSON form (dataclasses, lists, optionals)."""
    if data is None:
        return None
    if tp is DecodeConfig:
        return DecodeConfig.from_dict(data)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        hints = typing.get_type_hints(tp)
        # fields a trace written by an older version lacks take their defaults
        return tp(
            **{f.name: _build(hints[f.name], data[f.name]) for f in dataclasses.fields(tp) if f.init and f.name in data}
        )
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in typing.get_args(tp) if a is not type(None)]
        return _build(inner[0], data)
    if origin is list:
        (item,) = typing.get_args(tp)
        return [_build(item, x) for x in data]
    if origin is tuple:
        return tuple(data)
    return data
