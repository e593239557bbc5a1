"""Parallel drafters: k tokens in ONE small forward pass on top of the target's own hidden states (Stern et al.
2018; Xia et al. 2023).

Both read the target's final (normed) hidden states, which the verification pass computes anyway, and
predict through the target's frozen output embedding (lm_head). With t the last position the target
has scored and x_{t+1} the pending token it emitted, both draft tokens t+2 .. t+1+k:

* :class:`BlockwiseHeads` (Stern et al. 2018, "Blockwise Parallel Decoding"; the Medusa form
  h + SiLU(W_i h)): k heads on the single state h_t. Every head shares the same attention, the target's
  at position t ("shared attention").
* :class:`MaskQueryDrafter` (SpecDec's Spec-Drafter, Xia et al. 2023): k learned [MASK] query embeddings
  appended after the prefix; one transformer block lets each query attend to the last ``window``
  target states, to x_{t+1} and to the other queries with its own attention ("distinct attention").

Weights are small safetensors files trained by ``python -m specviz train-drafter`` (see
:mod:`specviz.training.parallel_drafters`) and shipped in ``specviz/weights/``. The target is never modified.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any

import torch

from specviz.drafters.base import DraftBlock
from specviz.drafters.parallel_heads import DrafterMeta, ParallelModule, default_weights, load_drafter
from specviz.models.loading import LoadedModel
from specviz.models.pair import ModelPair
from specviz.registry.shared_settings import DrafterShared
from specviz.rules.acceptance import Rule
from specviz.runtime.machine import device_wait
from specviz.runtime.protocol import KVCachedSequence
from specviz.settings import ConfigError


def target_states(target: LoadedModel, ids: list[int]) -> torch.Tensor:
    """The target's final (normed) hidden states (T, H) over ``ids``, float32 on the target's device:
    what a run's target cache holds for those positions, and what the drafters train on."""
    with target.lock, torch.inference_mode():
        out = target.model.model(input_ids=torch.tensor([ids], device=target.device))
    return out.last_hidden_state[0].float()


def window_memory(states: torch.Tensor, end: int, window: int) -> torch.Tensor:
    """The ``window`` states ending at position ``end - 1`` (W, H), left-padded with the first state
    when the sequence is shorter: the same view in training and in drafting."""
    memory = states[max(0, end - window) : end]
    if len(memory) < window:
        memory = torch.cat([memory[:1].expand(window - len(memory), -1), memory])
    return memory


def draft_logits(module: ParallelModule, target: LoadedModel, memory: torch.Tensor, pending_token: int) -> torch.Tensor:
    """Run the drafter once: logits (k, V) for tokens t+2 .. t+1+k through the frozen lm_head."""
    device = target.device
    with target.lock, torch.inference_mode():
        pending = target.model.get_input_embeddings()(torch.tensor([pending_token], device=device)).float()  # (1, H)
        hidden = module(memory[None].float(), pending)  # (1, k, H)
        lm_head = target.model.get_output_embeddings()
        return lm_head(hidden.to(target.model.dtype))[0].float()  # (k, V)


@dataclass
class ParallelDrafter:
    """Drafts k tokens in one small pass from the target's cached hidden states (see module docstring).

    ``target_state`` is the run's target KV cache, which also keeps the target's final hidden state of
    every cached position. Before the first verification there are none, so round 1 drafts nothing.
    """

    module: ParallelModule
    meta: DrafterMeta
    target: LoadedModel
    target_state: KVCachedSequence
    vocab_size: int

    def propose(self, context: list[int], gamma: int, rule: Rule, generator: torch.Generator) -> DraftBlock:
        t = len(context) - 1  # number of positions whose states are needed (all but the pending token)
        states = self.target_state.states
        if gamma <= 0 or states is None or len(states) < t or self.target_state.ids[:t] != context[:t] or t == 0:
            return DraftBlock(token_ids=[], draft_probs=[])
        memory = window_memory(states, t, self.meta.window)  # (W, H), ending at position t - 1
        logits = draft_logits(self.module, self.target, memory, context[-1])[: min(gamma, self.meta.k)]
        block = DraftBlock(token_ids=[], draft_probs=[], forward_passes=1)
        for row in logits:
            draft_probs = rule.draft_distribution(row[: self.vocab_size]).cpu()  # q_i: independent per slot
            block.token_ids.append(rule.draft_token(draft_probs, generator))
            block.draft_probs.append(draft_probs)
        return block

    def update(self, drafted: int, accepted_path: list[int]) -> None:
        """A trained drafter has no strategy to adapt."""


def drafter_inputs(shared: DrafterShared, pair: ModelPair, prefix: list[int]) -> tuple[ParallelDrafter, torch.Tensor]:
    """(drafter, memory): the drafter and the target-state window it reads after ``prefix`` (the states of
    prefix[:-1], as a run's cache would hold them; prefix[-1] is the pending token)."""
    drafter = build(None, shared, pair, KVCachedSequence())
    return drafter, window_memory(target_states(pair.target, prefix[:-1]), len(prefix) - 1, drafter.meta.window)


def draft_logits_along(
    settings: None, shared: DrafterShared, pair: ModelPair, prefix: list[int], draft_ids: list[int]
) -> torch.Tensor:
    """Logits (k, V) for a given draft after ``prefix``: every slot's q comes from the drafter's one pass."""
    drafter, memory = drafter_inputs(shared, pair, prefix)
    return draft_logits(drafter.module, pair.target, memory, prefix[-1])[: len(draft_ids)]


def ms_per_drafted_token(
    settings: None, shared: DrafterShared, pair: ModelPair, prefix: list[int], repeats: int, rule: Rule
) -> float:
    """Milliseconds of the one drafting pass over its k tokens, per token (median of ``repeats``, after a warm-up;
    its logits alone: ``rule`` shapes no pass of its own)."""
    drafter, memory = drafter_inputs(shared, pair, prefix)
    draft_logits(drafter.module, pair.target, memory, prefix[-1])  # warm-up
    times = []
    for _ in range(repeats):
        device_wait(pair.target.device)
        started = time.perf_counter()
        k = len(draft_logits(drafter.module, pair.target, memory, prefix[-1]))
        device_wait(pair.target.device)  # timed to its end on the device, not its launches
        times.append((time.perf_counter() - started) * 1e3 / k)
    return statistics.median(times)


def shipped_weights(name: str) -> dict[str, Any] | None:
    """The shipped weights file of drafter ``name``, described (None where none is shipped)."""
    path = default_weights(name)
    if not path.is_file():
        return None
    meta = load_drafter(str(path))[1]
    return dict(
        drafter=name,
        file=f"specviz/weights/{path.name}",
        size_mb=round(path.stat().st_size / 1e6, 2),
        k=meta.k,
        steps=meta.steps,
        seed=meta.seed,
        final_loss=round(meta.final_loss, 3),
        command=meta.command,
    )


def build(
    settings: None, shared: DrafterShared, pair: ModelPair, target_state: KVCachedSequence | None
) -> ParallelDrafter:
    """Blockwise heads or the mask-query drafter (``shared.drafter``), from trained weights that fit this target."""
    path = shared.parallel_weights or str(default_weights(shared.drafter))
    try:
        module, meta = load_drafter(path, str(pair.target.device))
    except FileNotFoundError as exc:
        raise ConfigError(
            f"No trained {shared.drafter} weights at {path}: train them with `python -m specviz "
            f"train-drafter --kind {shared.drafter} --target {shared.target}`"
        ) from exc
    hidden = int(pair.target.model.config.hidden_size)
    if meta.kind != shared.drafter or meta.hidden != hidden or meta.vocab != pair.vocab_size:
        weights = f"The weights at {path} are" if shared.parallel_weights else "The shipped weights are"
        raise ConfigError(
            f"{weights} a {meta.kind} drafter for {meta.target} (hidden {meta.hidden}, vocabulary {meta.vocab}); "
            f"{pair.target.name} has hidden {hidden} and vocabulary {pair.vocab_size}: pick another drafter for "
            "this pair"
        )
    state = target_state if target_state is not None else KVCachedSequence()  # without a run's cache: drafts nothing
    return ParallelDrafter(module, meta, pair.target, state, pair.vocab_size)
