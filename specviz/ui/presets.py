"""The lesson's presets: the model pairs the sidebar offers (with what each needs on this machine) and the prompts
(:data:`specviz.limits.PROMPT_PRESETS`, which the CLI's lesson shares)."""

from __future__ import annotations

from specviz.limits import DEFAULT_PROMPT, PROMPT_PRESETS
from specviz.models.hub import hub_answers, in_local_hub_cache
from specviz.models.loading import EMBEDDED
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


__all__ = ["CUSTOM_PAIR", "DEFAULT_PROMPT", "EMBEDDED_PAIR", "PAIR_PRESETS", "PROMPT_PRESETS", "QWEN_CODER_PAIR"]
