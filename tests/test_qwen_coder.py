"""The published pair, Qwen2.5-Coder-0.5B drafting for -1.5B, fetched by the README's test command (scripts/setup
--with qwen-coder): exact greedy output, lossless sampling at its computed power, the preset in the app."""

from __future__ import annotations

import pytest
from safetensors import safe_open

from specviz.analysis.lab import exact_lab
from specviz.config import DecodeConfig
from specviz.engine import load_pair, prompt_ids_for, speculative_decode
from specviz.models.published import FETCH_COMMAND, QWEN_CODER_05B, QWEN_CODER_15B, fetched
from specviz.runtime.cpu.int4 import Int4Linear
from specviz.runtime.cpu.q4k import Q4K_FILE
from specviz.runtime.llama_step import llama_weights
from specviz.ui.presets import QWEN_CODER_PAIR
from specviz.ui.state import Session

from .conftest import target_greedy
from .test_app import make_app, player_of

pytestmark = [
    pytest.mark.published,
    pytest.mark.slow,
    pytest.mark.skipif(
        not (fetched(QWEN_CODER_15B) and fetched(QWEN_CODER_05B)),
        reason=f"the Qwen2.5-Coder pair is not fetched: run `{FETCH_COMMAND}`",
    ),
]
PAIR = dict(target="qwen-coder-1.5b", draft="qwen-coder-0.5b", drafter="model", device="cpu")


@pytest.fixture(scope="module")
def pair():
    return load_pair(DecodeConfig(**PAIR))


def test_greedy_through_the_pair_is_the_targets_own_float32_generate(pair):
    config = DecodeConfig(**PAIR, max_new_tokens=12)
    ids = prompt_ids_for(pair, config, "Write a Python function that adds two numbers.", None)
    reference = target_greedy(pair.target, ids, 12)
    assert llama_weights(pair.draft.model) is not None  # the 0.5B drafts through the direct Llama body (Qwen2's biases)
    assert pair.draft.vocab_ranking.recommended == QWEN_CODER_05B.draft_vocab  # and FR-Spec's trimmed head
    for gamma in (2, 5):
        trace = speculative_decode(config.replace(gamma=gamma), prompt_ids=ids, pair=pair)
        assert trace.output_ids == reference, gamma
        assert trace.stats.accepted_tokens > 0


def test_the_int4_target_runs_its_gguf_q4k_blocks_and_speculation_is_its_own_greedy():
    config = DecodeConfig(**PAIR, dtype="int4", draft_dtype="int4", max_new_tokens=12)
    int4_pair = load_pair(config)
    with safe_open(QWEN_CODER_15B.cache_dir / Q4K_FILE, "pt") as blocks:
        kept = set(blocks.keys())
    layers = {f"{name}.weight": m for name, m in int4_pair.target.model.named_modules() if isinstance(m, Int4Linear)}
    assert {name for name, layer in layers.items() if layer.published} == kept  # the file's own 4-bit weights
    assert len(kept) > 0.8 * len(layers)  # every Q4_K matrix of Q4_K_M: the others are Q6_K, quantised to int4
    ids = prompt_ids_for(int4_pair, config, "Write a Python function that adds two numbers.", None)
    trace = speculative_decode(config.replace(gamma=4), prompt_ids=ids, pair=int4_pair)
    assert trace.output_ids == target_greedy(int4_pair.target, ids, 12)


def test_sampling_through_the_pair_follows_p_at_its_computed_power(pair):
    config = DecodeConfig(**PAIR, rule="sample", draft_vocab=0)
    ids = prompt_ids_for(pair, config, "Write a haiku about autumn rain.", None)
    lab = exact_lab(config, pair, ids, n=100_000)
    assert lab.broken_power > 0.99  # the test below would catch the broken rule at this n
    assert lab.p_values["speculative sampling"] > 1e-3
    assert lab.p_values["broken rule"] < 1e-3


def test_the_preset_pair_opens_in_the_app():
    at = make_app(
        {
            "target": PAIR["target"],
            "draft": PAIR["draft"],
            "prompt": "def add(a, b):",
            "max_new_tokens": "4",
            "chat_template": "0",
        }
    ).run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert at.selectbox(key=Session.pair.key).value == QWEN_CODER_PAIR
    trace, _, _ = player_of(at)
    assert trace["models"]["target"] == QWEN_CODER_15B.name and trace["models"]["draft"] == QWEN_CODER_05B.name
