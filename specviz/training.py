"""Train a parallel drafter (blockwise heads or mask-query) on text the target itself generates.

``python -m specviz train-drafter --kind blockwise`` does, reproducibly from ``--seed``:
  1. generate: the target's greedy continuation of each prompt in ``specviz/data/train_prompts.txt``
     (cached as JSON token ids, so the second drafter reuses it);
  2. states: one target forward per sequence gives the final hidden state of every position;
  3. train: for each position j (pending token x_{j+1}), the drafter reads the states up to j and learns
     tokens j+2 .. j+1+k with cross-entropy through the target's frozen lm_head (AdamW).
Greedy continuations are the target's own argmax choices, exactly what greedy verification accepts.
"""

from __future__ import annotations

import hashlib
import json
import random
import time
from pathlib import Path

import torch
from torch import nn
from tqdm import tqdm

from .config import DecodeConfig
from .engine import ModelPair, autoregressive_decode
from .models import LoadedModel, cache_root, encode_prompt
from .parallel_drafters import DrafterMeta, build_module, save_drafter, window_memory

PROMPTS_FILE = Path(__file__).parent / "data" / "train_prompts.txt"


def read_prompts(path: Path = PROMPTS_FILE) -> list[str]:
    return [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def generate_corpus(target: LoadedModel, prompts: list[str], new_tokens: int, progress: bool = True) -> list[list[int]]:
    """Prompt + greedy continuation token ids for every prompt, cached on disk as JSON."""
    key = hashlib.sha256(json.dumps([target.spec, prompts, new_tokens]).encode()).hexdigest()[:16]
    cache = cache_root() / "corpora" / f"{key}.json"
    if cache.is_file():
        return json.loads(cache.read_text())
    config = DecodeConfig(target=target.spec, drafter="ngram", rule="greedy", max_new_tokens=new_tokens)
    pair = ModelPair(target)
    corpus = []
    for prompt in tqdm(prompts, desc="generating with the target", disable=not progress):
        ids = encode_prompt(target.tokenizer, prompt, True)
        corpus.append(ids + autoregressive_decode(config, pair, ids)[0])
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps(corpus))
    return corpus


def sequence_states(target: LoadedModel, ids: list[int]) -> torch.Tensor:
    """Final (normed) hidden states (T, H) of the target over a whole sequence, float32 on the CPU."""
    with target.lock, torch.inference_mode():
        out = target.model.model(input_ids=torch.tensor([ids], device=target.device))
    return out.last_hidden_state[0].float().cpu()


def training_examples(corpus: list[list[int]], k: int) -> list[tuple[int, int]]:
    """(sequence, j) pairs with states up to j, pending token j+1 and labels j+2 .. j+1+k all present."""
    return [(s, j) for s, ids in enumerate(corpus) for j in range(len(ids) - 1 - k)]


def make_batch(batch: list[tuple[int, int]], corpus, states, k: int, window: int):
    """memory (B, W, H) left-padded by repeating the first state, pending ids (B,), labels (B, k)."""
    memories, pending, labels = [], [], []
    for s, j in batch:
        memories.append(window_memory(states[s], j + 1, window))
        pending.append(corpus[s][j + 1])
        labels.append(corpus[s][j + 2: j + 2 + k])
    return torch.stack(memories), torch.tensor(pending), torch.tensor(labels)


def train_drafter(kind: str, target: LoadedModel, corpus: list[list[int]], *, k: int = 4, window: int = 32,
                  steps: int = 600, batch_size: int = 32, lr: float = 1e-3, seed: int = 0,
                  progress: bool = True) -> tuple[nn.Module, DrafterMeta, list[float]]:
    """Train a drafter against the frozen target; return it with its metadata and the loss curve."""
    torch.manual_seed(seed)
    rng = random.Random(seed)
    device = target.device
    states = [sequence_states(target, ids).to(device) for ids in corpus]
    examples = training_examples(corpus, k)
    hidden = states[0].shape[-1]
    module = build_module(kind, hidden, k, window).to(device)
    embed = target.model.get_input_embeddings().weight.detach().float()  # frozen, float32 copies
    lm_head = target.model.get_output_embeddings().weight.detach().float()
    optimizer = torch.optim.AdamW(module.parameters(), lr=lr, weight_decay=0.0)
    losses = []
    bar = tqdm(range(steps), desc=f"training {kind}", disable=not progress)
    for _ in bar:
        memory, pending, labels = make_batch(rng.sample(examples, batch_size), corpus, states, k, window)
        pending, labels = pending.to(device), labels.to(device)
        out = module(memory, embed[pending])  # (B, k, H)
        logits = out @ lm_head.T  # (B, k, V)
        loss = nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        bar.set_postfix(loss=f"{sum(losses[-20:]) / len(losses[-20:]):.3f}")
    meta = DrafterMeta(kind=kind, k=k, hidden=hidden, window=window, vocab=lm_head.shape[0], target=target.spec,
                       steps=steps, seed=seed, final_loss=sum(losses[-50:]) / len(losses[-50:]))
    return module.cpu().eval(), meta, losses


def train_and_save(kind: str, target: LoadedModel, out: Path, *, new_tokens: int, prompts: list[str], command: str,
                   **train_args) -> DrafterMeta:
    started = time.perf_counter()
    corpus = generate_corpus(target, prompts, new_tokens)
    module, meta, _ = train_drafter(kind, target, corpus, **train_args)
    meta.command = command
    save_drafter(module, meta, out)
    print(f"saved {out} ({out.stat().st_size / 1e6:.1f} MB) in {time.perf_counter() - started:.0f} s; "
          f"final loss {meta.final_loss:.3f}")
    return meta
