"""The lesson's presets: the model pairs the sidebar offers (with what each needs on this machine) and the prompts."""

from __future__ import annotations

from specviz.models.loading import EMBEDDED, hub_answers, in_local_hub_cache
from specviz.models.published import PUBLISHED, fetched

EMBEDDED_PAIR = "SmolLM2-135M + its draft"  # short: the sidebar's menu cuts long names
QWEN_CODER_PAIR = "Qwen2.5-Coder 0.5B → 1.5B"
CUSTOM_PAIR = "Custom ids or directories"
# label -> (target, draft; None: the custom pair's text boxes); the hub pairs share a tokenizer within each family
PAIR_PRESETS: dict[str, tuple[str, str | None] | None] = {
    EMBEDDED_PAIR: (EMBEDDED, None),
    QWEN_CODER_PAIR: ("qwen-coder-1.5b", "qwen-coder-0.5b"),
    "SmolLM2 135M → 360M": ("HuggingFaceTB/SmolLM2-360M-Instruct", "HuggingFaceTB/SmolLM2-135M-Instruct"),
    "SmolLM2 135M → 1.7B": ("HuggingFaceTB/SmolLM2-1.7B-Instruct", "HuggingFaceTB/SmolLM2-135M-Instruct"),
    "Qwen2.5 0.5B → 1.5B": ("Qwen/Qwen2.5-1.5B-Instruct", "Qwen/Qwen2.5-0.5B-Instruct"),
    "Qwen2.5 0.5B → 7B": ("Qwen/Qwen2.5-7B-Instruct", "Qwen/Qwen2.5-0.5B-Instruct"),
    "distilgpt2 → gpt2-large": ("gpt2-large", "distilgpt2"),
    CUSTOM_PAIR: None,
}
# A lesson set: each prompt's output reads sensibly on the embedded pair and the Qwen pair (checked greedy, and
# sampled at T 0.7), and each teaches something: code is predictable (high acceptance, rounds shrink as γ grows),
# open prose is not (low acceptance), a list ends its items with tokens a draft can guess (bonus tokens).
PROMPT_PRESETS = {
    "Code: Fibonacci (high acceptance)": "Write a Python function that returns the n-th Fibonacci number.",
    "Code: SQL": "Write a SQL query that returns the ten customers with the highest total order value.",
    "A list: the planets (bonus tokens)": "List the planets of the solar system in order from the Sun.",
    "A fact: France's capital (short)": "What is the capital of France? Answer in one sentence.",
    "Explain: a hash map": "Explain what a hash map is in two sentences.",
    "Open prose: a haiku (low acceptance)": "Write a haiku about the sea.",
    "Translation (seed 000's sentence; too hard for the 135M model)": (
        "Translate to English: Machen sich Hunderte Millionen von Autofahrern Sorgen über ihre Privatsphäre?"
    ),
}
# The opening example: sensible code, both verdicts in its rounds, and γ visibly changes them (greedy, 32 tokens,
# embedded pair: 14 rounds and 18/27 drafted tokens accepted at γ = 2, 13 and 19/36 at γ = 3, 10 and 22/35 at γ = 4,
# 9 and 23/58 at γ = 8). The Fibonacci preset accepts every drafted token at γ = 3: a lesson shows no rejection there.
DEFAULT_PROMPT = PROMPT_PRESETS["Code: SQL"]


def pair_option(label: str) -> str:
    """A preset pair's menu entry with what it needs here: ✓ runs here, ⤓ fetch once, ☁ a model hub (unreachable)."""
    pair = PAIR_PRESETS[label]
    if pair is None:
        return label
    return f"{availability_mark(*pair)} {label}"


def availability_mark(target: str, draft: str | None) -> str:
    specs = [spec for spec in (target, draft) if spec]
    if any(spec in PUBLISHED and not fetched(PUBLISHED[spec]) for spec in specs):
        return "⤓"
    hub_ids = [spec for spec in specs if spec not in PUBLISHED and spec != EMBEDDED]
    return "☁" if hub_ids and not all(in_local_hub_cache(spec) for spec in hub_ids) and not hub_answers() else "✓"


def pair_label(target: str, draft: str | None) -> str:
    """The preset a (target, draft) pair is, else the custom entry."""
    for label, pair in PAIR_PRESETS.items():
        if pair and pair[0] == target and (pair[1] == draft or pair[1] is None):
            return label
    return CUSTOM_PAIR
