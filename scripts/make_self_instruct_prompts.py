"""Write the target's own user requests: specviz/data/self_instruct_seed<N>.txt, the draft's second prompt set.

Magpie (Xu et al. 2024, arXiv 2406.08464): an instruction-tuned model given only the chat template's
opening of a user turn writes a plausible user request itself. Sampled at temperature 1 from the
embedded SmolLM2-135M-Instruct, these requests are as varied as the chats the model was tuned on, so
the draft learns from the target's answers to the kind of request it expects, not only to our templates
(the template-only draft accepted 0.76 of its training prompts' tokens but far fewer on held-out ones).

Each seed writes a file of its own, distinct from the requests of every other seed's file, so more
requests are added by a new seed and the teacher answers already cached for earlier files stay valid.
Run once per seed (the output is committed, so training is reproducible without it; about 6 minutes
per 1,000 requests on 2 cores, 2 min 13 s for the 30,000 of seed 2 on one H100):
    .venv/bin/python scripts/make_self_instruct_prompts.py --count 1000 --seed 0
    .venv/bin/python scripts/make_self_instruct_prompts.py --count 2000 --seed 1
    .venv/bin/python scripts/make_self_instruct_prompts.py --count 30000 --seed 2 --batch-size 1024 --device cuda
The target samples in float32 on every device; batch b's torch seed depends on the batch size, so a
file is reproduced by its own command.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from tqdm import tqdm

from specviz.models.loading import load_model

DATA = Path(__file__).resolve().parent.parent / "specviz" / "data"
HELDOUT = DATA / "heldout_prompts.txt"
MARK = "\ue000"  # a private-use character: where the user's words would go in the template


def user_turn_opening(tokenizer) -> list[int]:
    """The chat template's tokens up to where a user's message starts (system turn included)."""
    text = tokenizer.apply_chat_template([{"role": "user", "content": MARK}], tokenize=False)
    return list(tokenizer(text[: text.index(MARK)], add_special_tokens=False)["input_ids"])


def acceptable(request: str) -> bool:
    """A request worth answering: a few words of text, not a fragment of markup or a wall of text."""
    words = request.split()
    return 4 <= len(words) <= 80 and request[:1].isalnum() and "<|" not in request and "http" not in request


def seed_file(seed: int) -> Path:
    return DATA / f"self_instruct_seed{seed}.txt"


def sample_requests(
    target, count: int, seed: int, taken: set[str], batch_size: int = 64, max_tokens: int = 64
) -> list[str]:
    """``count`` distinct acceptable requests not in ``taken``, sampled at temperature 1 in batches from
    the same opening; batch b of seed s is drawn from torch seed s * 1,000,000 + b."""
    opening = torch.tensor([user_turn_opening(target.tokenizer)] * batch_size, device=target.device)
    eos = target.model.generation_config.eos_token_id
    found: dict[str, None] = {}
    bar = tqdm(total=count, desc="requests")
    batch = 0
    while len(found) < count:
        torch.manual_seed(seed * 1_000_000 + batch)
        with torch.inference_mode():
            out = target.model.generate(
                input_ids=opening,
                attention_mask=torch.ones_like(opening),
                do_sample=True,
                temperature=1.0,
                top_k=0,
                top_p=1.0,
                max_new_tokens=max_tokens,
                eos_token_id=eos,
                pad_token_id=target.tokenizer.pad_token_id or 0,
            )
        for row in out[:, opening.shape[1] :].tolist():
            stop = next((i for i, t in enumerate(row) if t == eos or (isinstance(eos, list) and t in eos)), None)
            if stop is None:
                continue  # ran past max_tokens: a wall of text, not a request
            request = target.tokenizer.decode(row[:stop], skip_special_tokens=True).strip()
            if acceptable(request) and request not in taken and request not in found and len(found) < count:
                found[request] = None
                bar.update(1)
        batch += 1
    bar.close()
    return list(found)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch-size", type=int, default=64, help="requests sampled per generate call")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    out = seed_file(args.seed)
    others = [path for path in sorted(DATA.glob("self_instruct_seed*.txt")) if path != out]
    taken = {line.strip() for path in [HELDOUT, *others] for line in path.read_text(encoding="utf-8").splitlines()}
    target = load_model("embedded", args.device)
    requests = sample_requests(target, args.count, args.seed, taken, batch_size=args.batch_size)
    out.write_text("\n".join(r.replace("\n", "\\n") for r in requests) + "\n", encoding="utf-8")
    print(f"wrote {len(requests)} requests to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
