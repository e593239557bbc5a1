"""Train the EAGLE head for the embedded target: ``python -m specviz train-eagle``.

Reproducible from ``--seed`` and resumable (a checkpoint in the cache every ``CHECKPOINT_EVERY`` steps):
  1. text: the target's greedy answers to the first ``--answers`` committed prompts (:mod:`eagle_text`, cached);
  2. features: the target's final normed hidden states f over every sequence, once (cached);
  3. train (:mod:`eagle_loss`; EAGLE, Li et al. 2024, arXiv 2401.15077, Sec. 3.2): at every position i the head reads
     (f_i + noise, e(x_{i+1})) causally and predicts f^_{i+1}; the loss is the feature regression
     SmoothL1(f^_{i+1}, f_{i+1}) plus ``kl_weight`` x the forward KL from the target's p (its stored top-k) to the
     head's q over its K-token head, at the answer positions (where the target's p was kept), averaged over
     ``unroll`` drafting steps in which the head reads its own predicted features (EAGLE-3's training-time test);
     EAGLE's uniform noise on the exact input features makes it robust to inexact ones;
  4. rank the vocabulary by how often the target wrote each token (FR-Spec's head, Zhao et al. 2025), measure
     greedy chain acceptance of the shipped (float16) weights on the held-out prompts, ship them with a manifest.
The head starts from random weights, as EAGLE's does (starting its layer from the target's last layer was accepted
less held out on this model, in short runs on the same text).
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import time
from dataclasses import asdict
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from tqdm import tqdm

from specviz.cache import cache_root
from specviz.config import DecodeConfig
from specviz.drafters.eagle_head import WEIGHTS_FILE, EagleHead, EagleShape, load_head, output_rows, save_head
from specviz.models.loading import LoadedModel
from specviz.registry.drafters import EAGLE
from specviz.runtime.llama_step import llama_weights
from specviz.training.draft_model import HELDOUT_FILE, vocab_ranking
from specviz.training.eagle_loss import EagleSettings, step_loss
from specviz.training.eagle_text import Sequence, sequence_features, teacher_sequences
from specviz.training.teacher_text import read_prompt_file

CHECKPOINT_EVERY = 250


def lr_at(step: int, settings: EagleSettings) -> float:
    """Linear warm-up, then cosine decay to a tenth of ``lr``."""
    if step < settings.warmup:
        return settings.lr * (step + 1) / settings.warmup
    progress = (step - settings.warmup) / max(1, settings.steps - settings.warmup)
    return settings.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def checkpoint_path(settings: EagleSettings, target: LoadedModel) -> Path:
    key = hashlib.sha256(json.dumps([target.spec, asdict(settings)]).encode()).hexdigest()[:16]
    return cache_root() / "eagle-checkpoints" / f"{key}.safetensors"


def train_head(
    target: LoadedModel,
    sequences: list[Sequence],
    features: list[torch.Tensor],
    shape: EagleShape,
    head_ids: torch.Tensor,
    settings: EagleSettings,
    progress: bool = True,
) -> tuple[EagleHead, list]:
    """Step 3: the head trained from random weights (seeded), resuming from the latest checkpoint."""
    rows = (head_ids, output_rows(target.model, head_ids))
    torch.manual_seed(settings.seed)
    head = EagleHead(shape)
    optimizer = torch.optim.AdamW(head.parameters(), lr=settings.lr, weight_decay=0.0)
    path, start, losses = checkpoint_path(settings, target), 0, []
    if path.is_file():  # resume: the head's weights, Adam's moments and the step (the batches are drawn per step)
        stored = load_file(str(path))
        head.load_state_dict({k[5:]: v for k, v in stored.items() if k.startswith("head.")})
        for i, p in enumerate(head.parameters()):
            optimizer.state[p] = {
                "step": stored["step"].clone().float(),
                "exp_avg": stored[f"m.{i}"],
                "exp_avg_sq": stored[f"v.{i}"],
            }
        start = int(stored["step"])
    bar = tqdm(
        range(start, settings.steps),
        desc="training the EAGLE head",
        disable=not progress,
        initial=start,
        total=settings.steps,
    )
    for step in bar:
        rng = random.Random(settings.seed * 1_000_003 + step)
        chosen = rng.sample(range(len(sequences)), min(settings.rows_per_step, len(sequences)))
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, settings)
        loss, parts = step_loss(
            head,
            target,
            [sequences[i] for i in chosen],
            [features[i] for i in chosen],
            rows,
            settings,
            torch.Generator().manual_seed(settings.seed + step),
        )
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(parts)
        bar.set_postfix(reg=f"{parts['regression']:.3f}", kl=f"{parts['kl']:.3f}")
        if (step + 1) % CHECKPOINT_EVERY == 0 and step + 1 < settings.steps:
            tensors = {f"head.{k}": v.detach().clone() for k, v in head.state_dict().items()}
            for i, p in enumerate(head.parameters()):
                tensors[f"m.{i}"], tensors[f"v.{i}"] = optimizer.state[p]["exp_avg"], optimizer.state[p]["exp_avg_sq"]
            tensors["step"] = torch.tensor(step + 1)
            path.parent.mkdir(parents=True, exist_ok=True)
            save_file(tensors, str(path.with_suffix(".tmp")))
            path.with_suffix(".tmp").replace(path)
    return head.eval(), losses


def heldout_acceptance(
    target: LoadedModel, weights_path: Path, prompts: list[str], max_new_tokens: int = 48, gamma: int = 4
) -> dict:
    """Greedy chain acceptance (accepted / verified drafted tokens) of a head file on prompts it never saw, overall
    and by drafted position."""
    from specviz.analysis.metrics import pooled_acceptance_by_position
    from specviz.engine import ModelPair, speculative_decode

    config = DecodeConfig(
        drafter=EAGLE, gamma=gamma, max_new_tokens=max_new_tokens, top_n=1, parallel_weights=str(weights_path)
    )
    traces = [speculative_decode(config, prompt=p, pair=ModelPair(target)) for p in prompts]
    pooled = pooled_acceptance_by_position(traces).set_index("position")
    rates = pooled.acceptance_rate.to_dict()
    return {
        "acceptance": float(pooled.accepted.sum() / max(1, pooled.verified.sum())),
        "by_position": {i: float(rates.get(i, 0.0)) for i in range(1, gamma + 1)},
        "tokens_per_round": sum(len(r.emitted_ids) for t in traces for r in t.rounds[1:])
        / max(1, sum(len(t.rounds) - 1 for t in traces)),
    }


def train_eagle(
    target: LoadedModel, settings: EagleSettings, *, out: Path = WEIGHTS_FILE, command: str = "", progress: bool = True
) -> dict:
    """Steps 1-4; returns the manifest written beside the weights."""
    timings, started = {}, time.perf_counter()
    sequences = teacher_sequences(target, settings.text, progress)
    timings["text_s"] = round(time.perf_counter() - started, 1)
    features = sequence_features(target, sequences, progress=progress)
    timings["features_s"] = round(time.perf_counter() - started - timings["text_s"], 1)
    assert llama_weights(target.model) is not None, "EAGLE trains on a plain Llama target (the embedded SmolLM2)"
    shape = EagleShape.of_target(target, settings.draft_vocab)
    vocab = shape.vocab
    order = vocab_ranking([s.ids[s.prompt_len :].tolist() for s in sequences], vocab)
    head, losses = train_head(
        target, sequences, features, shape, order[: settings.draft_vocab or vocab], settings, progress
    )
    timings["train_s"] = round(time.perf_counter() - started - timings["text_s"] - timings["features_s"], 1)
    tail = losses[-100:] or [{"regression": float("nan"), "kl": float("nan")}]
    manifest = {
        "command": command,
        "settings": asdict(settings),
        "target": target.spec,
        "answers": len(sequences),
        "answer_tokens": sum(len(s.ids) - s.prompt_len for s in sequences),
        "steps": settings.steps,
        "final_loss": {k: sum(p[k] for p in tail) / len(tail) for k in tail[0]},
        "timings": timings,
    }
    save_head(head, order, manifest, out)
    load_head.cache_clear()  # the file just written is measured, not an earlier one of the same name
    heldout = read_prompt_file(HELDOUT_FILE)
    manifest["heldout"] = {
        "prompts": len(heldout),
        "max_new_tokens": 48,
        "gamma": 4,
        **heldout_acceptance(target, out, heldout),
    }
    out.with_suffix(".json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return manifest
