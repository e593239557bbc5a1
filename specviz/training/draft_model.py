"""Distil the embedded draft model from the target: ``python -m specviz train-draft``.

Reproducible from ``--seed``:
  1. text: the target answers every prompt of ``specviz/data/draft_prompts.txt`` (our templates) and of
     every ``self_instruct_seed<N>.txt`` (requests the target wrote itself, Magpie-style), greedily and
     sampled at T = 0.7, keeping its top-k log-probabilities at every generated position
     (teacher_text.py, cached per prompt file and temperature): soft labels carry the whole
     distribution, which sampling needs;
  2. init: the draft is the target's embedding, a few of its decoder layers and its final norm
     (``cut_model``); the embedding and the tied output head stay frozen (they are the target's);
  3. distil: minimise the forward KL  KL(p || q) = sum_x p(x) (log p(x) - log q(x))  from the target's p
     to the draft's q at every response position, over the target's top-k tokens (DistillSpec, Zhou et
     al. 2023, arXiv 2310.08461, Sec. 3: on-policy teacher text, a chosen divergence);
  4. rank the vocabulary by how often the target generated each token (FR-Spec, Zhao et al. 2025);
  5. round each matrix's change from its start layer to int8 rows (``stored_tensors``: up to 8 layers fit
     in 30 MB), measure greedy acceptance of exactly those weights on the held-out prompts, and ship
     them with a manifest.

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
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm import tqdm

from specviz import DATA_DIR
from specviz.config import DecodeConfig
from specviz.models.embedded_draft import (
    SHARED_WEIGHTS,
    cut_model,
    layer_state,
    restored_state,
    save_shipped,
    stored_tensors,
)
from specviz.models.loading import LoadedModel
from specviz.models.vocab_ranking import VocabRanking
from specviz.training.teacher_text import TeacherBatch, generate_teacher_text, read_prompt_file

TEMPLATE_PROMPTS = DATA_DIR / "draft_prompts.txt"  # scripts/make_draft_prompts.py

def prompt_files() -> list[Path]:
    """The templates, then every seed's file of self-written requests (scripts/make_self_instruct_prompts.py)."""
    return [TEMPLATE_PROMPTS, *sorted(DATA_DIR.glob("self_instruct_seed*.txt"))]

HELDOUT_FILE = DATA_DIR / "heldout_prompts.txt"
# Spread over the depth: this cut distils to a lower KL than 0,1,28,29 or 0,1,2,3.
# Deeper cuts (0,6,...,29 and 0,4,...,29) were accepted more held out but cost more per token on a CPU and were no
# faster there.
DEFAULT_LAYERS = (0, 10, 20, 29)


@dataclass(frozen=True)
class TrainSettings:
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
    return [(b, r) for b, batch in enumerate(batches) for r in range(batch.ids.shape[0])
            if int(batch.total_lens[r]) > int(batch.prompt_lens[r])]


def step_tensors(batches: list[TeacherBatch], rows: list[tuple[int, int]], pad_id: int):
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


def distil(target: LoadedModel, batches: list[TeacherBatch], settings: TrainSettings, progress: bool = True):
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
        chosen, order = order[: settings.rows_per_step], order[settings.rows_per_step:]
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


def answer_ids(batches: list[TeacherBatch]):
    """The target's answers (token id lists), prompts left out."""
    for batch in batches:
        for r in range(batch.ids.shape[0]):
            yield batch.ids[r, int(batch.prompt_lens[r]): int(batch.total_lens[r])].tolist()


def vocab_ranking(answers, vocab_size: int) -> torch.Tensor:
    """Every token id, most often generated by the target in ``answers`` first (ties and unseen ids by id)."""
    counts = Counter()
    for answer in answers:
        counts.update(answer)
    return torch.tensor(sorted(range(vocab_size), key=lambda t: (-counts[t], t)), dtype=torch.long)


def heldout_acceptance(target: LoadedModel, draft: LoadedModel, prompts: list[str], max_new_tokens: int = 48,
                       gamma: int = 4, draft_vocab: int | None = 0) -> float:
    """Greedy acceptance (accepted / verified drafted tokens) of the draft on prompts it never saw (``draft_vocab``:
    as the config takes it; None, the model's recommended trimmed head)."""
    from specviz.engine import ModelPair, speculative_decode

    pair = ModelPair(target, draft)
    config = DecodeConfig(drafter="model", draft=draft.spec, gamma=gamma, max_new_tokens=max_new_tokens,
                          draft_vocab=draft_vocab, top_n=1)
    traces = [speculative_decode(config, prompt=p, pair=pair) for p in prompts]
    verified = [pos for t in traces for r in t.rounds for pos in r.draft if pos.status != "not_verified"]
    return sum(pos.accepted for pos in verified) / max(1, len(verified))


def train_draft(target: LoadedModel, settings: TrainSettings, *, out: Path, command: str,
                progress: bool = True) -> dict:
    """Steps 1-5 above; returns the manifest written beside the weights."""
    started = time.perf_counter()
    # One cache folder per prompt file (a new seed's file leaves the others' answers valid).
    prompt_sets = {path: read_prompt_file(path) for path in prompt_files()}
    prompts = [p for prompt_set in prompt_sets.values() for p in prompt_set]
    batches = [batch for prompt_set in prompt_sets.values()
               for batch in generate_teacher_text(target, prompt_set, new_tokens=settings.new_tokens,
                                                  temperatures=list(settings.temperatures), seed=settings.seed,
                                                  top_k=settings.top_k, batch_size=settings.generation_batch,
                                                  progress=progress)]
    text_s = time.perf_counter() - started
    # on a GPU: generation's cached blocks back to the driver; else a no-op
    torch.cuda.empty_cache()
    model, losses = distil(target, batches, settings, progress)
    train_s = time.perf_counter() - started - text_s
    ranking = vocab_ranking(answer_ids(batches), int(target.model.get_output_embeddings().weight.shape[0]))
    start = layer_state(target.model.state_dict(), list(settings.layers))
    shipped = stored_tensors(model, start)
    missing, unexpected = model.load_state_dict(restored_state(shipped, start), strict=False)
    if unexpected or set(missing) - set(SHARED_WEIGHTS):  # measure exactly the weights that ship, all of them
        raise RuntimeError(f"the shipped tensors do not cover the draft: missing {missing}, unexpected {unexpected}")
    draft = LoadedModel(spec="embedded-draft (just trained)", name="draft (just trained)",
                        model=model.to(target.model.dtype), tokenizer=target.tokenizer, device=target.device,
                        vocab_ranking=VocabRanking(ranking, settings.draft_vocab))
    heldout = read_prompt_file(HELDOUT_FILE)
    manifest = {
        "command": command, "seed": settings.seed, "target": target.spec, "layers_from_target": list(settings.layers),
        "divergence": settings.divergence, "steps": len(losses), "rows_per_step": settings.rows_per_step,
        "lr": settings.lr,
        "prompts": len(prompts), "answers": len(response_rows(batches)),
        "prompt_files": {path.name: len(prompt_set) for path, prompt_set in prompt_sets.items()},
        "temperatures": list(settings.temperatures),
        "response_tokens": int(sum(int((b.total_lens - b.prompt_lens).sum()) for b in batches)),
        "teacher_top_k": settings.top_k, "final_loss": round(sum(losses[-20:]) / len(losses[-20:]), 4),
        "first_loss": round(sum(losses[:20]) / len(losses[:20]), 4),
        "draft_vocab": settings.draft_vocab,
        "heldout_greedy_acceptance": round(heldout_acceptance(target, draft, heldout, draft_vocab=0), 4),
        "heldout_greedy_acceptance_trimmed": round(
            heldout_acceptance(target, draft, heldout, draft_vocab=settings.draft_vocab), 4),
        "heldout_prompts": len(heldout), "device": target.device.type, "generation_batch": settings.generation_batch,
        "mixed_precision": "bf16" if mixed_precision(target.device) else "none",
        "text_seconds": round(text_s), "train_seconds": round(train_s),
    }
    save_shipped(shipped, list(settings.layers), ranking, manifest, out)
    return manifest
