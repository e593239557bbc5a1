"""The round loop on tiny real models: exactness, losslessness, determinism, bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

import specviz.runtime.draft_forward
import specviz.runtime.skipping_forward
from specviz.analysis.lab import chi_square_power, goodness_of_fit, output_law
from specviz.config import DecodeConfig
from specviz.engine import ModelPair, load_pair, speculative_decode
from specviz.engine.trace import Trace
from specviz.models.loading import load_model
from specviz.rules.distributions import softmax32
from specviz.rules.sampling import BrokenResidualRule
from specviz.runtime.draft_forward import draft_forward
from specviz.runtime.llama_step import is_plain_llama, llama_weights
from specviz.runtime.machine import SHARED_KV_HEADS_FLAG, share_kv_heads_in_masked_attention
from specviz.runtime.protocol import KVCachedSequence, TreeLayout
from specviz.runtime.reference import full_forward
from specviz.runtime.skipping_forward import layer_skip_forward, skipping_body
from specviz.settings import ConfigError, ModelLoadError, VocabularyMismatchError

from .conftest import target_greedy

PROMPT = [3, 7, 5, 9, 3, 7]


def tiny_config(tiny_dirs, **changes) -> DecodeConfig:
    base = DecodeConfig(
        target=tiny_dirs["target"],
        draft=tiny_dirs["draft"],
        drafter="model",
        rule="greedy",
        gamma=4,
        max_new_tokens=24,
        device="cpu",
    )
    return base.replace(**changes)


@pytest.mark.parametrize("gamma", [1, 2, 3, 5, 8])
def test_greedy_matches_target_generate(tiny_dirs, tiny_pair, gamma):
    trace = speculative_decode(tiny_config(tiny_dirs, gamma=gamma), prompt_ids=PROMPT, pair=tiny_pair)
    assert trace.output_ids == target_greedy(tiny_pair.target, PROMPT, 24)
    assert trace.stats.target_forward_passes == len(trace.rounds)
    statuses = {p.status for r in trace.rounds for p in r.draft}
    assert {"accepted", "rejected"} <= statuses  # both paths of the rule were exercised


def test_a_draft_stops_at_its_first_unsure_token_and_greedy_stays_the_targets_own(tiny_dirs, tiny_pair):
    """The draft model's confidence exit: a round drafts γ tokens unless one's top draft probability max q is below
    the threshold, and then that token is its last; the output is still the target's own greedy text."""
    gamma = 5
    plain = speculative_decode(tiny_config(tiny_dirs, gamma=gamma), prompt_ids=PROMPT, pair=tiny_pair)
    tops = sorted(p.draft_top.probs[0] for r in plain.rounds for p in r.draft)
    threshold = tops[len(tops) // 2]  # the median draft confidence: some rounds stop early, some do not
    trace = speculative_decode(
        tiny_config(tiny_dirs, gamma=gamma, confidence_exit=threshold), prompt_ids=PROMPT, pair=tiny_pair
    )
    assert trace.output_ids == target_greedy(tiny_pair.target, PROMPT, 24)
    for r in trace.rounds[:-1]:  # the last round may also be cut by the tokens still wanted
        confidences = [p.draft_top.probs[0] for p in r.draft]
        assert all(c >= threshold for c in confidences[:-1]) and r.exit_threshold == threshold
        assert len(confidences) == gamma or confidences[-1] < threshold
    assert min(len(r.draft) for r in trace.rounds[:-1]) < gamma <= max(len(r.draft) for r in trace.rounds)
    assert sum(len(r.draft) for r in trace.rounds) < sum(len(r.draft) for r in plain.rounds)


@pytest.mark.parametrize("drafter", ["layerskip", "ngram"])
def test_greedy_matches_target_generate_for_model_free_drafters(tiny_dirs, tiny_pair, drafter):
    config = tiny_config(tiny_dirs, drafter=drafter, skip_layers=(1, 2))
    trace = speculative_decode(config, prompt_ids=PROMPT, pair=ModelPair(tiny_pair.target))
    assert trace.output_ids == target_greedy(tiny_pair.target, PROMPT, 24)


def test_every_round_emits_accepted_prefix_plus_one(tiny_dirs, tiny_pair):
    trace = speculative_decode(tiny_config(tiny_dirs, rule="sample", seed=4), prompt_ids=PROMPT, pair=tiny_pair)
    emitted = []
    for r in trace.rounds:
        accepted = [p.token_id for p in r.draft if p.accepted]
        extra = (r.correction or r.bonus).token_id
        assert r.emitted_ids == accepted + [extra]
        assert (r.correction is None) == all(p.accepted for p in r.draft)
        assert r.target_positions == len(r.draft) + 1
        emitted += r.emitted_ids
    assert emitted == trace.output_ids


def test_identical_draft_and_target_accept_everything(tiny_dirs, tiny_pair):
    same = ModelPair(tiny_pair.target, tiny_pair.target)
    for rule in ("greedy", "sample", "topbeta"):
        config = tiny_config(tiny_dirs, draft=tiny_dirs["target"], rule=rule, seed=1)
        trace = speculative_decode(config, prompt_ids=PROMPT, pair=same)
        assert trace.stats.acceptance_rate == 1.0, rule
        assert all(r.bonus is not None for r in trace.rounds)


def test_beta_one_gives_greedy_output(tiny_dirs, tiny_pair):
    greedy = speculative_decode(tiny_config(tiny_dirs), prompt_ids=PROMPT, pair=tiny_pair)
    beta1 = speculative_decode(
        tiny_config(tiny_dirs, rule="topbeta", beta=1, tau=100.0), prompt_ids=PROMPT, pair=tiny_pair
    )
    assert beta1.output_ids == greedy.output_ids
    beta5 = speculative_decode(
        tiny_config(tiny_dirs, rule="topbeta", beta=5, tau=100.0), prompt_ids=PROMPT, pair=tiny_pair
    )
    assert beta5.stats.acceptance_rate >= greedy.stats.acceptance_rate


def test_trace_json_round_trip_and_seeded_determinism(tiny_dirs, tiny_pair):
    config = tiny_config(tiny_dirs, rule="sample", seed=11, temperature=0.8, top_k=20, top_p=0.9)
    first = speculative_decode(config, prompt_ids=PROMPT, pair=tiny_pair)
    assert Trace.from_json(first.to_json()) == first
    second = speculative_decode(config, prompt_ids=PROMPT, pair=tiny_pair)
    assert first.without_timings().to_json() == second.without_timings().to_json()
    other_seed = speculative_decode(config.replace(seed=12), prompt_ids=PROMPT, pair=tiny_pair)
    assert other_seed.to_json() != first.to_json()


def _first_tokens(config, pair, n):
    return [speculative_decode(config.replace(seed=s), prompt_ids=PROMPT, pair=pair).output_ids[0] for s in range(n)]


@pytest.mark.slow  # a statistical test at its computed power: many samples
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_speculative_sampling_preserves_target_distribution(tiny_dirs, dtype):
    """In bfloat16 too: the rule's probabilities are float32 either way, and the law is kept up to the rounding of
    the bf16 forward passes, far below what 800 draws can see."""
    tiny_pair = ModelPair(load_model(tiny_dirs["target"], "cpu", dtype), load_model(tiny_dirs["draft"], "cpu", dtype))
    n = 800  # enough: the power check below computes the chance of catching the broken rule at this n
    with torch.inference_mode():
        logits = tiny_pair.target.model(torch.tensor([PROMPT])).logits[0, -1]
        draft_logits = tiny_pair.draft.model(torch.tensor([PROMPT])).logits[0, -1]
    p, q = softmax32(logits), softmax32(draft_logits)
    assert float(torch.minimum(p, q).sum()) < 0.9  # the pair really differs, so rejections happen
    broken = output_law(BrokenResidualRule(), p, q)  # resampling from p instead of the residual
    assert chi_square_power(p, broken, n, level=1e-3) > 0.999
    # two new tokens: one round drafts one token and checks it, so the first token is the checked one
    config = tiny_config(tiny_dirs, rule="sample", gamma=3, max_new_tokens=2, dtype=dtype)
    tokens = _first_tokens(config, tiny_pair, n)
    assert goodness_of_fit(tokens, p) > 1e-3
    # and the same test, on these very samples, rejects the broken rule's law and the draft's own
    assert goodness_of_fit(tokens, broken) < 1e-3
    assert goodness_of_fit(tokens, q) < 1e-6


def test_bad_input_gets_clear_errors(tiny_dirs, tiny_pair):
    with pytest.raises(ConfigError, match="prompt is empty"):
        speculative_decode(tiny_config(tiny_dirs), prompt="   ", pair=tiny_pair)
    with pytest.raises(ConfigError, match="prompt is empty"):
        speculative_decode(tiny_config(tiny_dirs), prompt_ids=[], pair=tiny_pair)
    with pytest.raises(ConfigError, match="2048"):
        speculative_decode(tiny_config(tiny_dirs), prompt_ids=[3] * 3000, pair=tiny_pair)
    with pytest.raises(ConfigError, match="outside the vocabulary"):
        speculative_decode(tiny_config(tiny_dirs), prompt_ids=[3, 999], pair=tiny_pair)
    for field, value, message in [
        ("gamma", 0, "gamma"),
        ("gamma", 17, "gamma"),
        ("beta", 0, "beta"),
        ("temperature", -0.1, "temperature"),
        ("top_p", 0.0, "top_p"),
        ("top_p", 1.5, "top_p"),
        ("max_new_tokens", 0, "max_new_tokens"),
        ("rule", "nope", "rule"),
        ("drafter", "nope", "drafter"),
        ("dtype", "float64", "dtype"),
    ]:
        with pytest.raises(ConfigError, match=message):
            tiny_config(tiny_dirs, **{field: value}).validated()
    with pytest.raises(ConfigError, match="skip_layers"):
        speculative_decode(
            tiny_config(tiny_dirs, drafter="layerskip", skip_layers=(0,)),
            prompt_ids=PROMPT,
            pair=ModelPair(tiny_pair.target),
        )


def test_unknown_model_and_tokenizer_mismatch(tiny_dirs, tmp_path):
    with pytest.raises(ModelLoadError, match="not a model directory here|Unknown model"):  # offline | hub reachable
        load_model(str(tmp_path / "no-such-model"), "cpu")
    with pytest.raises(VocabularyMismatchError, match="different tokenizers"):
        load_pair(
            DecodeConfig(target=tiny_dirs["target"], draft=tiny_dirs["other_vocab"], drafter="model", device="cpu")
        )


def test_the_models_run_in_the_precision_asked_for_and_the_rules_stay_float32(tiny_dirs):
    default = load_pair(tiny_config(tiny_dirs))
    assert default.target.model.dtype == torch.float32 == default.draft.model.dtype  # exact by default
    half = tiny_config(tiny_dirs, dtype="bfloat16")
    pair = load_pair(half)
    assert pair.target.model.dtype == torch.bfloat16 == pair.draft.model.dtype
    assert pair.target is not default.target  # one shared model per precision, the float32 one untouched
    trace = speculative_decode(half, prompt_ids=PROMPT, pair=pair)
    positions = [pos for r in trace.rounds for pos in r.draft]
    assert trace.output_ids and positions
    assert all(0.0 <= pos.q <= 1.0 and 0.0 <= pos.p <= 1.0 for pos in positions)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the switch is for machines without a GPU")
def test_the_kv_head_switch_is_set_on_a_cpu_and_a_users_value_wins(monkeypatch):
    monkeypatch.delenv(SHARED_KV_HEADS_FLAG, raising=False)
    share_kv_heads_in_masked_attention(torch.device("cuda"))
    assert SHARED_KV_HEADS_FLAG not in os.environ
    share_kv_heads_in_masked_attention(torch.device("cpu"))
    assert os.environ[SHARED_KV_HEADS_FLAG] == "1"
    monkeypatch.setenv(SHARED_KV_HEADS_FLAG, "0")
    share_kv_heads_in_masked_attention(torch.device("cpu"))
    assert os.environ[SHARED_KV_HEADS_FLAG] == "0"


def test_masked_passes_share_kv_heads_in_place_with_the_same_logits(tiny_pair, monkeypatch):
    from transformers import DynamicCache
    from transformers.integrations import sdpa_attention

    target = tiny_pair.target
    assert target.model.config.num_key_value_heads < target.model.config.num_attention_heads  # grouped heads
    copies = []
    monkeypatch.setattr(sdpa_attention, "repeat_kv", lambda x, n: copies.append(n) or x.repeat_interleave(n, dim=1))

    def verification_logits(flag: str) -> torch.Tensor:
        monkeypatch.setenv(SHARED_KV_HEADS_FLAG, flag)
        cache = DynamicCache()
        with torch.inference_mode():
            target.model(torch.tensor([PROMPT]), past_key_values=cache, use_cache=True)
            return target.model(torch.tensor([[4, 8, 2]]), past_key_values=cache, use_cache=True).logits

    copied = verification_logits("0")
    assert copies  # without the switch, the masked 3-token pass copies the key/value heads
    copies.clear()
    assert torch.equal(verification_logits("1"), copied) and not copies


@pytest.mark.parametrize(
    "changes",
    [
        dict(drafter="tree", tree_mode="constant", branching=2, tree_depth=3),  # a tree attention mask
        dict(drafter="layerskip", skip_layers=(1, 2)),  # layers called with the engine's own causal mask
        dict(rule="sample", dtype="bfloat16"),
    ],
)
def test_every_masked_path_gives_the_same_trace_with_shared_kv_heads(tiny_dirs, monkeypatch, changes):
    # every body transformers' own, as the flag concerns them
    for module in (specviz.runtime.draft_forward, specviz.runtime.skipping_forward):
        monkeypatch.setattr(module, "llama_weights", lambda model: None)
    config = tiny_config(tiny_dirs, max_new_tokens=12, **changes)
    pair = load_pair(config)

    def trace_with(flag: str) -> str:
        monkeypatch.setenv(SHARED_KV_HEADS_FLAG, flag)
        return speculative_decode(config, prompt_ids=PROMPT, pair=pair).without_timings().to_json()

    assert trace_with("1") == trace_with("0")


def assert_same_logits_over_feeds(forward, reference, loaded) -> None:
    """Feed the prompt, a block, one token and a tree through both forwards (each with its own cache):
    every call's logits equal bit for bit, and the shared model's weights are only read."""
    before = {k: v.clone() for k, v in loaded.model.state_dict().items()}
    cached = len(PROMPT) + 3 + 1  # after the first three feeds below
    allowed = torch.ones(3, cached + 3, dtype=torch.bool)
    # a, then b and c both after a
    allowed[:, cached:] = torch.tensor([[1, 0, 0], [1, 1, 0], [1, 0, 1]], dtype=torch.bool)
    tree = TreeLayout(positions=[cached, cached + 1, cached + 1], allowed=allowed)
    ours, theirs = KVCachedSequence(), KVCachedSequence()
    for ids, n_last, layout in [(PROMPT, 2, None), ([4, 8, 2], 3, None), ([6], 1, None), ([5, 9, 3], 3, tree)]:
        assert torch.equal(
            ours.feed(forward, loaded, ids, n_last, layout), theirs.feed(reference, loaded, ids, n_last, layout)
        )
    assert all(torch.equal(before[k], v) for k, v in loaded.model.state_dict().items())


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_drafts_lean_llama_body_gives_transformers_logits_bit_for_bit(tiny_dirs, dtype):
    draft = load_pair(tiny_config(tiny_dirs, dtype=dtype)).draft
    assert llama_weights(draft.model) is not None
    assert_same_logits_over_feeds(draft_forward(0), full_forward, draft)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_qwen2_draft_takes_the_lean_body_with_its_projection_biases_bit_for_bit(tmp_path, dtype):
    from tests.tiny import make_tiny_model

    draft = load_model(make_tiny_model(tmp_path / "qwen2", seed=5, layers=2, hidden=64, qwen2=True), "cpu", dtype)
    weights = llama_weights(draft.model)
    assert weights is not None and weights.layers[0].q.bias is not None and weights.layers[0].q.bias.abs().sum() > 0
    assert_same_logits_over_feeds(draft_forward(0), full_forward, draft)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_layer_skip_through_the_lean_body_gives_transformers_logits_bit_for_bit(tiny_dirs, dtype):
    target, skip = load_pair(tiny_config(tiny_dirs, dtype=dtype)).target, frozenset({1, 2})
    assert llama_weights(target.model) is not None

    def transformers_layers(loaded, new_ids, cache, cached, n_last, layout=None):
        with torch.inference_mode():
            return loaded.model.lm_head(skipping_body(loaded, skip, new_ids, cache, cached, n_last, layout))

    assert_same_logits_over_feeds(layer_skip_forward(skip), transformers_layers, target)


def test_what_draft_passes_derive_from_a_model_is_made_once_and_does_not_keep_it_alive():
    import gc
    import weakref

    from transformers import LlamaConfig, LlamaForCausalLM

    from specviz.models.loading import LoadedModel
    from specviz.runtime.draft_forward import trimmed_head
    from specviz.runtime.vocab_ranking import VocabRanking

    model = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=32,
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
        )
    )
    loaded = LoadedModel(
        spec="tiny",
        name="tiny",
        model=model,
        tokenizer=None,
        device=torch.device("cpu"),
        vocab_ranking=VocabRanking(torch.arange(31, -1, -1), 8),
    )
    assert llama_weights(model) is llama_weights(model) is not None
    ids, head = trimmed_head(loaded, 8)
    assert trimmed_head(loaded, 8)[1] is head and ids.tolist() == list(range(31, 23, -1))
    assert torch.equal(head.weight, model.get_output_embeddings().weight[ids])
    alive = weakref.ref(model), weakref.ref(loaded)
    del model, loaded
    gc.collect()
    # a model the model cache evicts is freed, with what was made from it
    assert alive[0]() is None and alive[1]() is None


def test_models_the_lean_body_cannot_compute_exactly_run_through_transformers():
    from transformers import LlamaConfig, MistralConfig, Qwen2Config

    assert is_plain_llama(LlamaConfig())
    assert not is_plain_llama(LlamaConfig(attention_bias=True))
    assert not is_plain_llama(LlamaConfig(rope_scaling={"rope_type": "linear", "factor": 2.0}))
    assert not is_plain_llama(LlamaConfig(hidden_act="gelu"))
    assert not is_plain_llama(MistralConfig(sliding_window=4))
    assert is_plain_llama(Qwen2Config()) and not is_plain_llama(Qwen2Config(use_sliding_window=True, sliding_window=4))


def test_layer_skip_does_not_mutate_the_shared_model(tiny_dirs, tiny_pair):
    target = tiny_pair.target
    before = {k: v.clone() for k, v in target.model.state_dict().items()}
    layers_before, config_before = list(target.model.model.layers), target.model.config.to_dict()
    speculative_decode(
        tiny_config(tiny_dirs, drafter="layerskip", skip_layers=(1, 2)), prompt_ids=PROMPT, pair=ModelPair(target)
    )
    assert list(target.model.model.layers) == layers_before
    assert target.model.config.to_dict() == config_before
    assert all(torch.equal(before[k], v) for k, v in target.model.state_dict().items())


@pytest.mark.slow  # several CLI processes, each loading torch
def test_cli_trace_samples_and_errors(tiny_dirs, tmp_path):
    out = tmp_path / "traces.jsonl"
    cmd = [
        sys.executable,
        "-m",
        "specviz",
        "trace",
        "--target",
        tiny_dirs["target"],
        "--draft",
        tiny_dirs["draft"],
        "--drafter",
        "model",
        "--rule",
        "sample",
        "--gamma",
        "3",
        "--prompt-ids",
        "3,7,5",
        "--max-new-tokens",
        "6",
        "--samples",
        "3",
        "--seed",
        "5",
        "--device",
        "cpu",
        "--out",
        str(out),
    ]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    lines = out.read_text().splitlines()
    assert len(lines) == 3
    traces = [json.loads(line) for line in lines]
    assert [t["config"]["seed"] for t in traces] == [5, 6, 7]
    for t in traces:
        assert {"config", "prompt_ids", "output_ids", "output_text", "rounds", "stats"} <= set(t)
        assert t["prompt_ids"] == [3, 7, 5] and len(t["output_ids"]) == 6
        assert {"acceptance_rate", "mean_tokens_per_round", "target_forward_passes", "new_tokens"} <= set(t["stats"])
        for r in t["rounds"]:
            assert {"emitted_ids", "draft", "correction", "bonus"} <= set(r)
            assert all({"token_id", "status", "p", "q"} <= set(d) and "accepted" not in d for d in r["draft"])
    bad = subprocess.run(cmd[:-2] + ["--gamma", "0"], capture_output=True, text=True)
    assert bad.returncode == 2 and "gamma must be" in bad.stderr and "Traceback" not in bad.stderr


def test_a_chain_round_reads_the_device_once_a_drafted_token_and_once_for_its_verification(tiny_dirs, tiny_pair):
    """#72's host reads, counted on the CPU (each ``.cpu()`` or ``.item()`` is a wait for a GPU): a chain round brings
    each drafted token's q to the host as it is drawn (the next draft step needs it: the draws come from the run's
    seeded CPU generator) and the target's p at every verified position in ONE transfer, k + 1 reads in all."""
    reads: list[str] = []
    originals = {name: getattr(torch.Tensor, name) for name in ("cpu", "item")}

    def counted(name):
        def read(self, *args, **kwargs):
            reads.append(name)
            return originals[name](self, *args, **kwargs)

        return read

    per_round = []
    config = tiny_config(tiny_dirs, gamma=4, max_new_tokens=24)
    try:
        for name in originals:
            setattr(torch.Tensor, name, counted(name))
        trace = speculative_decode(
            config, prompt_ids=PROMPT, pair=tiny_pair, on_round=lambda record, new: per_round.append(len(reads))
        )
    finally:
        for name, original in originals.items():
            setattr(torch.Tensor, name, original)
    counts = [after - before for before, after in zip([0, *per_round], per_round)]
    assert counts == [r.draft_forward_passes + 1 for r in trace.rounds]  # k q's, then one for every p
    assert sum(r.draft_forward_passes for r in trace.rounds) > len(trace.rounds)  # rounds that drafted several
