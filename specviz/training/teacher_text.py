"""The target's own text and distributions, generated in batches and cached: the draft's training data.

DistillSpec (Zhou et al. 2023, arXiv 2310.08461) distils a draft on text the teacher itself generates,
with the teacher's distribution at every position as the soft label. ``generate_teacher_text`` runs
the target's ``generate`` over batches of chat-formatted prompts (left padding, greedy or sampled at a
temperature) and keeps, for every generated position, the response token and the target's top-k
log-probabilities from the raw logits (``output_logits``, before any temperature warp), so one pass
yields the text and the labels.

Each batch is written to its own safetensors file under ``$SPECVIZ_CACHE/teacher-text/<key>/`` as soon
as it is done: a long background run can be stopped and resumed, and nothing is ever unpickled.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from tqdm import tqdm

from specviz.cache import cache_root
from specviz.engine import eos_ids
from specviz.models.loading import LoadedModel, encode_prompt

PAD = -1  # pad value in stored id tensors (never a real token id)


@dataclass(frozen=True)
class TeacherBatch:
    """Prompts and the target's responses, right-padded with PAD.

    ids:         (B, L) int64   prompt + response token ids
    prompt_lens: (B,)   int64   prompt length P of each row
    total_lens:  (B,)   int64   P + response length
    top_ids:     (B, R, K) int64  the target's k most likely ids at response step s (position P - 1 + s)
    top_logp:    (B, R, K) float32 their log-probabilities under the raw (unwarped) target
    features:    (B, L, H) float16 the target's final normed hidden states, when kept (``keep_features``): those
                 of positions 0 .. feature_lens - 1 (generation never scores its last token, so it has none)
    feature_lens: (B,) int64
    """

    ids: torch.Tensor
    prompt_lens: torch.Tensor
    total_lens: torch.Tensor
    top_ids: torch.Tensor
    top_logp: torch.Tensor
    features: torch.Tensor | None = None
    feature_lens: torch.Tensor | None = None

    def tensors(self) -> dict[str, torch.Tensor]:
        optional = {"features": self.features, "feature_lens": self.feature_lens}  # kept together, or neither
        kept = {name: t for name, t in optional.items() if t is not None}
        return {
            "ids": self.ids,
            "prompt_lens": self.prompt_lens,
            "total_lens": self.total_lens,
            "top_ids": self.top_ids.to(torch.int32),
            "top_logp": self.top_logp.to(torch.float16),
            **kept,
        }

    @classmethod
    def from_tensors(cls, t: dict[str, torch.Tensor]) -> "TeacherBatch":
        return cls(
            t["ids"],
            t["prompt_lens"],
            t["total_lens"],
            t["top_ids"].long(),
            t["top_logp"].float(),
            t.get("features"),
            t.get("feature_lens"),
        )


def generate_batch(
    target: LoadedModel,
    prompt_ids: list[list[int]],
    new_tokens: int,
    temperature: float,
    seed: int,
    top_k: int,
    keep_features: bool = False,
) -> TeacherBatch:
    """One batched ``generate`` call: greedy when ``temperature == 0``, else sampling at that temperature; with
    ``keep_features``, also the final normed hidden states it computed anyway (read off the final norm's output
    while ``generate`` runs, under the model's lock: no second forward)."""
    pad_id = int(
        target.tokenizer.pad_token_id if target.tokenizer.pad_token_id is not None else target.tokenizer.eos_token_id
    )
    width = max(len(p) for p in prompt_ids)
    input_ids = torch.full((len(prompt_ids), width), pad_id, dtype=torch.long)
    attention = torch.zeros_like(input_ids)
    for row, ids in enumerate(prompt_ids):  # left padding, as batched decoder-only generation needs
        input_ids[row, width - len(ids) :] = torch.tensor(ids)
        attention[row, width - len(ids) :] = 1
    sampling = (
        dict(do_sample=True, temperature=temperature, top_k=0, top_p=1.0) if temperature > 0 else dict(do_sample=False)
    )
    torch.manual_seed(seed)
    steps_out: list[torch.Tensor] = []  # (B, width, H) for the prompts, then (B, 1, H) per generated token
    with target.lock, torch.inference_mode(), final_states(target, steps_out, keep_features):
        # PreTrainedModel has no generate in transformers' types (GenerationMixin gives it to causal LMs)
        out = target.model.generate(  # type: ignore[operator]
            input_ids=input_ids.to(target.device),
            attention_mask=attention.to(target.device),
            max_new_tokens=new_tokens,
            pad_token_id=pad_id,
            return_dict_in_generate=True,
            output_logits=True,
            **sampling,
        )
    responses = out.sequences[:, width:].cpu()  # (B, R)
    # Raw logits of every step, reduced to the top-k on the model's device one step at a time (a GPU
    # batch of 1,024 rows would otherwise move R x 1,024 x 49,152 floats to the host).
    steps = [torch.topk(torch.log_softmax(step.float(), dim=-1), top_k, dim=-1) for step in out.logits]
    top_ids = torch.stack([s.indices for s in steps], dim=1).cpu()  # (B, R, K)
    top_logp = torch.stack([s.values for s in steps], dim=1).cpu()
    eos = eos_ids(target)
    rows, lengths = [], []
    for prompt, response in zip(prompt_ids, responses.tolist()):
        stop = next((i + 1 for i, t in enumerate(response) if t in eos), len(response))  # keep the EOS itself
        rows.append(prompt + response[:stop])
        lengths.append(len(prompt))
    length = max(len(r) for r in rows)
    padded = torch.full((len(rows), length), PAD, dtype=torch.long)
    for i, r in enumerate(rows):
        padded[i, : len(r)] = torch.tensor(r)
    batch = TeacherBatch(padded, torch.tensor(lengths), torch.tensor([len(r) for r in rows]), top_ids, top_logp)
    return with_features(batch, steps_out, width) if keep_features else batch


@contextlib.contextmanager
def final_states(target: LoadedModel, steps_out: list[torch.Tensor], keep: bool) -> Iterator[None]:
    """While open, append the output of the target's final norm (its final hidden states) of every forward."""
    hook = (
        target.model.model.norm.register_forward_hook(
            lambda module, args, output: steps_out.append(output.detach().to(torch.float16).cpu())
        )
        if keep
        else None
    )
    try:
        yield
    finally:
        if hook is not None:
            hook.remove()


def with_features(batch: TeacherBatch, steps_out: list[torch.Tensor], width: int) -> TeacherBatch:
    """The batch with each row's features laid out like its ids: the prompt's (left-padded in ``steps_out[0]``), then
    one per generated token but the last."""
    generated = torch.cat(steps_out[1:], dim=1) if len(steps_out) > 1 else steps_out[0][:, :0]  # (B, R - 1, H)
    features = torch.zeros(*batch.ids.shape, steps_out[0].shape[-1], dtype=torch.float16)
    lens = []
    for row, (prompt_len, total) in enumerate(zip(batch.prompt_lens.tolist(), batch.total_lens.tolist())):
        row_features = torch.cat([steps_out[0][row, width - prompt_len :], generated[row]])[:total]
        features[row, : len(row_features)] = row_features
        lens.append(len(row_features))
    return dataclasses.replace(batch, features=features, feature_lens=torch.tensor(lens))


def corpus_key(spec: str, prompts: list[str], new_tokens: int, seed: int, top_k: int, batch_size: int) -> str:
    """Names the cache folder; each temperature's batches are files of their own inside it, so adding a
    temperature later reuses the batches already made."""
    payload = json.dumps([spec, prompts, new_tokens, seed, top_k, batch_size])
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def generate_teacher_text(
    target: LoadedModel,
    prompts: list[str],
    *,
    new_tokens: int,
    temperatures: list[float],
    seed: int,
    top_k: int = 32,
    batch_size: int = 16,
    progress: bool = True,
    keep_features: bool = False,
) -> list[TeacherBatch]:
    """Every prompt answered once per temperature (0 = greedy), in batches of similar prompt length,
    each batch cached as it finishes. Returns all batches (loaded from the cache where present; a batch cached
    without features stays without them)."""
    folder = cache_root() / "teacher-text" / corpus_key(target.spec, prompts, new_tokens, seed, top_k, batch_size)
    folder.mkdir(parents=True, exist_ok=True)
    encoded = [encode_prompt(target.tokenizer, p, True) for p in prompts]
    order = sorted(range(len(encoded)), key=lambda i: (len(encoded[i]), i))  # similar lengths share a batch
    jobs = [
        (t, number, order[i : i + batch_size])
        for t in temperatures
        for number, i in enumerate(range(0, len(order), batch_size))
    ]
    batches = []
    for temperature, number, members in tqdm(jobs, desc="target answers (batches)", disable=not progress):
        path = folder / f"t{temperature:.2f}-batch-{number:05d}.safetensors"
        if path.is_file():
            batches.append(TeacherBatch.from_tensors(load_file(str(path))))
            continue
        batch = generate_batch(
            target, [encoded[i] for i in members], new_tokens, temperature, seed + number, top_k, keep_features
        )
        save_file(batch.tensors(), str(path.with_suffix(".tmp")))
        path.with_suffix(".tmp").replace(path)  # atomic: a stopped run never leaves half a batch
        batches.append(batch)
    return batches


def read_prompt_file(path: Path) -> list[str]:
    """One prompt per line; the two characters backslash-n stand for a newline inside a prompt."""
    lines = path.read_text(encoding="utf-8").splitlines()
    return [line.strip().replace("\\n", "\n") for line in lines if line.strip()]
