"""Train a parallel drafter (blockwise heads or mask-query) on text the target itself generates.

``python -m specviz train-drafter --kind blockwise`` does, reproducibly from ``--seed``:
  1. generate: the target's greedy continuation of each prompt in ``specviz/data/train_prompts.txt``
     (cached as JSON token ids, so the second drafter reuses it);
  2. states: one target forward per sequence gives the final hidden state of every position;
  3. train: for each generated position j (pending token x_{j+1}), the drafter reads the states up to j
     and learns tokens j+2 .. j+1+k through the target's frozen lm_head (AdamW), by distillation: the
     cross-entropy against the target's full distribution at each of those positions (Hinton et al.
     2015), whose argmax is the greedy token. Soft targets carry far more signal per token than the
     hard labels of a small corpus.
Greedy continuations are the target's own argmax choices, exactly what greedy verification accepts.
"""

from __future__ import annotations

import hashlib
import json
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from specviz import DATA_DIR
from specviz.cache import cache_root
from specviz.config import DecodeConfig
from specviz.drafters.parallel import target_states, window_memory
from specviz.drafters.parallel_heads import DrafterMeta, ParallelModule, build_module, save_drafter
from specviz.engine import ModelPair, autoregressive_decode
from specviz.models.loading import LoadedModel, encode_prompt
from specviz.registry.drafters import NGRAM
from specviz.registry.rules import GREEDY

PROMPTS_FILE = DATA_DIR / "train_prompts.txt"


def read_prompts(path: Path = PROMPTS_FILE) -> list[str]:
    return [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


@dataclass
class Corpus:
    sequences: list[list[int]]  # prompt + greedy continuation ids
    prompt_lens: list[int]


def generate_corpus(target: LoadedModel, prompts: list[str], new_tokens: int, progress: bool = True) -> Corpus:
    """Prompt + greedy continuation token ids for every prompt, cached on disk as JSON."""
    key = hashlib.sha256(json.dumps([target.spec, prompts, new_tokens]).encode()).hexdigest()[:16]
    cache = cache_root() / "corpora" / f"{key}.json"
    if cache.is_file():
        return Corpus(**json.loads(cache.read_text()))
    config = DecodeConfig(target=target.spec, drafter=NGRAM, rule=GREEDY, max_new_tokens=new_tokens)
    pair = ModelPair(target)
    corpus = Corpus([], [])
    for prompt in tqdm(prompts, desc="generating with the target", disable=not progress):
        ids = encode_prompt(target.tokenizer, prompt, True)
        corpus.sequences.append(ids + autoregressive_decode(config, pair, ids)[0])
        corpus.prompt_lens.append(len(ids))
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps(corpus.__dict__))
    return corpus


def training_examples(corpus: Corpus, k: int) -> list[tuple[int, int]]:
    """(sequence, j) pairs where drafting really happens (pending token j+1 generated, or the prompt's
    last) with states up to j and targets j+2 .. j+1+k all present."""
    return [
        (s, j)
        for s, (ids, n) in enumerate(zip(corpus.sequences, corpus.prompt_lens))
        for j in range(max(0, n - 2), len(ids) - 1 - k)
    ]


def make_batch(
    batch: list[tuple[int, int]], corpus: Corpus, states: list[torch.Tensor], k: int, window: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """memory (B, W, H) (see window_memory), pending ids (B,), and the target's states (B, k, H) at
    positions j+1 .. j+k, whose logits are its distributions over tokens j+2 .. j+1+k."""
    memories, pending, teacher = [], [], []
    for s, j in batch:
        memories.append(window_memory(states[s], j + 1, window))
        pending.append(corpus.sequences[s][j + 1])
        teacher.append(states[s][j + 1 : j + 1 + k])
    return torch.stack(memories), torch.tensor(pending), torch.stack(teacher)


def train_drafter(
    kind: str,
    target: LoadedModel,
    corpus: Corpus,
    *,
    k: int = 4,
    window: int = 32,
    steps: int = 600,
    batch_size: int = 32,
    lr: float = 1e-3,
    seed: int = 0,
    progress: bool = True,
) -> tuple[ParallelModule, DrafterMeta, list[float]]:
    """Train a drafter against the frozen target; return it with its metadata and the loss curve."""
    torch.manual_seed(seed)
    rng = random.Random(seed)
    device = target.device
    states = [target_states(target, ids) for ids in corpus.sequences]
    examples = training_examples(corpus, k)
    hidden = states[0].shape[-1]
    module = build_module(kind, hidden, k, window).to(device)
    embedding = target.model.get_input_embeddings().weight
    assert isinstance(embedding, torch.Tensor), "an input embedding holds its matrix as its weight"
    embed = embedding.detach().float()  # frozen, float32 copies
    lm_head = target.model.get_output_embeddings().weight.detach().float()
    optimizer = torch.optim.AdamW(module.parameters(), lr=lr, weight_decay=0.0)
    losses = []
    bar = tqdm(range(steps), desc=f"training {kind}", disable=not progress)
    for _ in bar:
        memory, pending, teacher = make_batch(rng.sample(examples, batch_size), corpus, states, k, window)
        out = module(memory, embed[pending.to(device)])  # (B, k, H)
        logits = out @ lm_head.T  # (B, k, V)
        with torch.no_grad():
            target_probs = torch.softmax(teacher @ lm_head.T, dim=-1)  # (B, k, V): the target's p
        loss = -(target_probs * torch.log_softmax(logits, dim=-1)).sum(-1).mean()  # cross-entropy to p
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        bar.set_postfix(loss=f"{sum(losses[-20:]) / len(losses[-20:]):.3f}")
    meta = DrafterMeta(
        kind=kind,
        k=k,
        hidden=hidden,
        window=window,
        vocab=lm_head.shape[0],
        target=target.spec,
        steps=steps,
        seed=seed,
        final_loss=sum(losses[-50:]) / len(losses[-50:]),
    )
    return module.cpu().eval(), meta, losses


def train_and_save(
    kind: str,
    target: LoadedModel,
    out: Path,
    *,
    new_tokens: int,
    prompts: list[str],
    command: str,
    **train_args: Any,  # train_drafter's settings
) -> DrafterMeta:
    started = time.perf_counter()
    corpus = generate_corpus(target, prompts, new_tokens)
    module, meta, _ = train_drafter(kind, target, corpus, **train_args)
    meta.command = command
    save_drafter(module, meta, out)
    print(
        f"saved {out} ({out.stat().st_size / 1e6:.1f} MB) in {time.perf_counter() - started:.0f} s; "
        f"final loss {meta.final_loss:.3f}"
    )
    return meta
