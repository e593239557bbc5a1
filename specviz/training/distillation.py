"""Steps 2 and 3 of ``train-draft`` (:mod:`specviz.training.draft_model`), with the command's settings: a cut of the
target trained on its own teacher text to bring the draft's q to the target's top-k p at every response position, by
forward KL or TVD (DistillSpec, Zhou et al. 2023, arXiv 2310.08461, Sec. 3).

Why forward KL: greedy verification accepts exactly when argmax q = argmax p, and on the target's own
greedy text the teacher's argmax is the next token, which forward KL weights by p (mode-covering, every
top token pulls). Its gradient is dense and well-scaled, while TVD = 1/2 sum |p - q| (whose complement
is the sampling acceptance, Leviathan et al. Thm. 3.5) gives each token a gradient of fixed size
+-1/2 whatever the gap, which learns more slowly at the few hundred steps a 2-core CPU affords. TVD is
available as ``--divergence tvd`` for comparison.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

import torch
from tqdm import tqdm
from transformers import LlamaForCausalLM

from specviz.models.embedded_draft import cut_model
from specviz.models.loading import LoadedModel
from specviz.training.teacher_text import TeacherBatch

# Spread over the depth: this cut distils to a lower KL than 0,1,28,29 or 0,1,2,3.
# Deeper cuts (0,6,...,29 and 0,4,...,29) were accepted more held out but cost more per token on a CPU and were no
# faster there.
DEFAULT_LAYERS = (0, 10, 20, 29)


@dataclass(frozen=True)
class TrainSettings:
    """Every setting of ``train-draft``: the teacher text's (step 1), the cut's and the distillation's (steps 2-3) and
    the head size K the draft ships with (step 4)."""

    layers: tuple[int, ...] = DEFAULT_LAYERS
    new_tokens: int = 96  # tokens the target answers per prompt (the held-out checks read 48-64)
    temperatures: tuple[float, ...] = (0.0, 0.7)  # greedy answers and sampled ones (the T = 0.7 lesson samples at 0.7)
    top_k: int = 32  # the teacher's top-k kept per position (most of p's mass on this model's text)
    # Many epochs on few answers overfit; on the shipped runs' answers 6 epochs are accepted more held out than 2.
    epochs: float = 6.0
    rows_per_step: int = 8
    lr: float = 1e-3
    warmup: int = 20
    divergence: str = "fkl"  # fkl | tvd
    seed: int = 0
    generation_batch: int = 64
    draft_vocab: int = 8192  # FR-Spec head size the engine uses by default (measured: c and alpha per K)


def divergence_loss(draft_logp: torch.Tensor, top_ids: torch.Tensor, top_logp: torch.Tensor, kind: str) -> torch.Tensor:
    """Mean divergence over N positions between the target's top-k p and the draft's q.

    draft_logp (N, V): log q;  top_ids, top_logp (N, K): the target's top-k ids and log p.
    fkl: sum_k p_k (log p_k - log q_k);  tvd: 1/2 (sum_k |p_k - q_k| + |sum_k q_k - sum_k p_k|), the mass
    outside the top-k counted as one bucket.
    """
    q_logp = draft_logp.gather(-1, top_ids)  # (N, K)
    p = top_logp.exp()
    if kind == "fkl":
        return (p * (top_logp - q_logp)).sum(-1).mean()
    q = q_logp.exp()
    return 0.5 * ((p - q).abs().sum(-1) + (q.sum(-1) - p.sum(-1)).abs()).mean()


def response_rows(batches: list[TeacherBatch]) -> list[tuple[int, int]]:
    """(batch, row) of every answer with at least one generated token."""
    return [
        (b, r)
        for b, batch in enumerate(batches)
        for r in range(batch.ids.shape[0])
        if int(batch.total_lens[r]) > int(batch.prompt_lens[r])
    ]


def step_tensors(
    batches: list[TeacherBatch], rows: list[tuple[int, int]], pad_id: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded ids (B, L) and mask for the rows, plus where each response position sits:
    flat (row, position) indices and the teacher's top-k there."""
    length = max(int(batches[b].total_lens[r]) for b, r in rows)
    ids = torch.full((len(rows), length), pad_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    where, top_ids, top_logp = [], [], []
    for i, (b, r) in enumerate(rows):
        batch = batches[b]
        total, prompt = int(batch.total_lens[r]), int(batch.prompt_lens[r])
        ids[i, :total] = batch.ids[r, :total]
        mask[i, :total] = 1
        steps = total - prompt  # response tokens; the distribution before each sits one position earlier
        where += [(i, prompt - 1 + s) for s in range(steps)]
        top_ids.append(batch.top_ids[r, :steps])
        top_logp.append(batch.top_logp[r, :steps])
    return ids, mask, torch.tensor(where), torch.cat(top_ids), torch.cat(top_logp)


def mixed_precision(device: torch.device) -> bool:
    """Whether the draft's forward runs under bf16 autocast while training: on a GPU with bf16 (Ampere
    on), where it is faster; the weights, the optimiser and the loss stay float32 (Micikevicius et al.
    2018, arXiv 1710.03740). The CPU and older GPUs train in float32 throughout."""
    return device.type == "cuda" and torch.cuda.is_bf16_supported()


def distil(
    target: LoadedModel, batches: list[TeacherBatch], settings: TrainSettings, progress: bool = True
) -> tuple[LlamaForCausalLM, list[float]]:
    """Train a cut of the target on the teacher text; return (draft model, loss curve)."""
    torch.manual_seed(settings.seed)
    rng = random.Random(settings.seed)
    draft = cut_model(target.model, list(settings.layers)).float().train()
    draft.model.embed_tokens.weight.requires_grad_(False)  # shared with the target, so frozen (head tied)
    trainable = [p for p in draft.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=settings.lr, weight_decay=0.0, betas=(0.9, 0.98))
    rows = response_rows(batches)
    steps = max(1, int(settings.epochs * len(rows) / settings.rows_per_step))

    def lr_at(step: int) -> float:  # linear warm-up, then cosine decay to a tenth
        if step < settings.warmup:
            return (step + 1) / settings.warmup
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * (step - settings.warmup) / max(1, steps - settings.warmup)))

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_at)
    pad_id = int(target.tokenizer.pad_token_id or 0)
    order: list[tuple[int, int]] = []
    losses: list[float] = []
    autocast = mixed_precision(target.device)
    bar = tqdm(range(steps), desc=f"distilling ({settings.divergence})", disable=not progress)
    for _ in bar:
        if len(order) < settings.rows_per_step:
            order += rng.sample(rows, len(rows))  # a fresh shuffle per epoch
        chosen, order = order[: settings.rows_per_step], order[settings.rows_per_step :]
        ids, mask, where, top_ids, top_logp = (t.to(target.device) for t in step_tensors(batches, chosen, pad_id))
        with torch.autocast(target.device.type, dtype=torch.bfloat16, enabled=autocast):
            hidden = draft.model(input_ids=ids, attention_mask=mask).last_hidden_state  # (B, L, H)
            logits = draft.lm_head(hidden[where[:, 0], where[:, 1]])  # (N, V): only response positions
        loss = divergence_loss(torch.log_softmax(logits.float(), dim=-1), top_ids, top_logp, settings.divergence)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trainable, 1.0)
        optimizer.step()
        scheduler.step()
        losses.append(loss.item())
        bar.set_postfix(loss=f"{sum(losses[-20:]) / len(losses[-20:]):.3f}")
    return draft.eval(), losses
