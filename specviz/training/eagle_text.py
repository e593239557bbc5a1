"""EAGLE's training text: the target's own greedy answers and its hidden states over them.

The prompts are the committed prompt files that ``train-draft`` answers (``draft_model.prompt_files``, in
order), the first ``answers`` of them, answered greedily by the target through
:func:`specviz.training.teacher_text.generate_teacher_text` (batched ``generate``, the target's top-k
log-probabilities kept at every answer position, each batch cached as it finishes, so a stopped run resumes).
They are cut into chunks of ``CHUNK`` prompts, each its own cache folder: asking for more answers later
reuses every full chunk already made.

The target's final (normed) hidden states over each sequence, the features EAGLE learns from, are kept while the
target generates (``keep_features``: read off the forward passes ``generate`` makes anyway, so each token's feature
is computed once). Generation never scores its last token, so a sequence's last token, which has no feature, is
left out. Text cached without features gets them from one batched forward, cached too.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

import torch
from safetensors.torch import load_file, save_file
from tqdm import tqdm

from specviz.cache import cache_root
from specviz.models.loading import LoadedModel
from specviz.training.draft_model import prompt_files
from specviz.training.teacher_text import TeacherBatch, generate_teacher_text, read_prompt_file

CHUNK = 1000  # prompts per cache folder


@dataclass(frozen=True)
class TextSettings:
    answers: int = 5000  # prompts answered (the first ones of the prompt files, in order)
    new_tokens: int = 96
    top_k: int = 32
    generation_batch: int = 64
    seed: int = 0


@dataclass
class Sequence:
    """One prompt and the target's greedy answer, with the answer positions' teacher top-k.

    ids (L,) prompt + answer; prompt_len P; top_ids / top_logp (L - P, K): the target's k most likely next
    tokens at positions P - 1 .. L - 2 (the distribution each answer token was chosen from); features (L, H): the
    target's final normed hidden states, when generation kept them.
    """

    ids: torch.Tensor
    prompt_len: int
    top_ids: torch.Tensor
    top_logp: torch.Tensor
    features: torch.Tensor | None = None


def prompt_chunks(answers: int) -> list[list[str]]:
    """The first ``answers`` prompts of the committed files, in chunks of ``CHUNK``."""
    prompts = [p for path in prompt_files() for p in read_prompt_file(path)][:answers]
    return [prompts[i : i + CHUNK] for i in range(0, len(prompts), CHUNK)]


def batch_sequences(batch: TeacherBatch) -> list[Sequence]:
    """The rows of one teacher batch, padding removed (and, with features, cut to the tokens that have one)."""
    lengths = batch.total_lens if batch.feature_lens is None else torch.minimum(batch.total_lens, batch.feature_lens)
    rows = []
    for row, (prompt_len, total) in enumerate(zip(batch.prompt_lens.tolist(), lengths.tolist())):
        answer = total - prompt_len
        features = None if batch.features is None else batch.features[row, :total].clone()
        rows.append(
            Sequence(
                batch.ids[row, :total].clone(),
                prompt_len,
                batch.top_ids[row, :answer],
                batch.top_logp[row, :answer],
                features,
            )
        )
    return rows


def teacher_sequences(target: LoadedModel, settings: TextSettings, progress: bool = True) -> list[Sequence]:
    """The target's greedy answers to the first ``settings.answers`` prompts (generated, or read from the cache)."""
    return [
        row
        for chunk in prompt_chunks(settings.answers)
        for batch in generate_teacher_text(
            target,
            chunk,
            new_tokens=settings.new_tokens,
            temperatures=[0.0],
            seed=settings.seed,
            top_k=settings.top_k,
            batch_size=settings.generation_batch,
            progress=progress,
            keep_features=True,
        )
        for row in batch_sequences(batch)
    ]


def sequence_features(
    target: LoadedModel, sequences: list[Sequence], batch_size: int = 16, progress: bool = True
) -> list[torch.Tensor]:
    """The target's final normed hidden states (L, H) of every sequence, float16 on the CPU: those generation kept,
    the others from :func:`forward_features`."""
    missing = [s for s in sequences if s.features is None]
    computed = iter(forward_features(target, missing, batch_size, progress) if missing else [])
    return [s.features if s.features is not None else next(computed) for s in sequences]


def forward_features(
    target: LoadedModel, sequences: list[Sequence], batch_size: int = 16, progress: bool = True
) -> list[torch.Tensor]:
    """The final normed hidden states (L, H) of sequences, by batched target forwards, cached per set of sequences."""
    digest = hashlib.sha256(json.dumps([target.spec, [s.ids.tolist() for s in sequences]]).encode()).hexdigest()[:16]
    path = cache_root() / "eagle-features" / f"{digest}.safetensors"
    if path.is_file():
        stored = load_file(str(path))
        return [stored[str(i)] for i in range(len(sequences))]
    order = sorted(range(len(sequences)), key=lambda i: len(sequences[i].ids))
    features: dict[str, torch.Tensor] = {}
    for start in tqdm(range(0, len(order), batch_size), desc="target features", disable=not progress):
        members = order[start : start + batch_size]
        width = max(len(sequences[i].ids) for i in members)
        ids = torch.zeros(len(members), width, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for row, i in enumerate(members):  # right padding: causal attention leaves the real positions exact
            ids[row, : len(sequences[i].ids)] = sequences[i].ids
            mask[row, : len(sequences[i].ids)] = 1
        with target.lock, torch.inference_mode():
            hidden = target.model.model(
                input_ids=ids.to(target.device), attention_mask=mask.to(target.device)
            ).last_hidden_state
        for row, i in enumerate(members):
            features[str(i)] = hidden[row, : len(sequences[i].ids)].to(torch.float16).cpu().contiguous()
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file(features, str(path.with_suffix(".tmp")))
    path.with_suffix(".tmp").replace(path)
    return [features[str(i)] for i in range(len(sequences))]
