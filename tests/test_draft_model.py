"""The shipped embedded draft: it loads, fits the target, stays exact (full and trimmed head), and is the trained
one."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, DynamicCache

from specviz.analysis import sweep
from specviz.analysis.lab import chi_square_power, goodness_of_fit
from specviz.cli import main
from specviz.config import DecodeConfig
from specviz.drafters.model import draft_forward_for
from specviz.engine import ModelPair, load_pair, prompt_ids_for, speculative_decode
from specviz.limits import EMBEDDED
from specviz.models.embedded_draft import MANIFEST_FILE, ROW_SCALE, WEIGHTS_FILE, embedded_draft_dir, layer_state
from specviz.models.loading import encode_prompt, load_model
from specviz.rules.distributions import softmax32
from specviz.rules.sampling import SpeculativeSamplingRule
from specviz.runtime.cpu.kernel_paths import kernels_of, use_kernels
from specviz.settings import ConfigError, VocabularyMismatchError
from specviz.training.draft_model import HELDOUT_FILE
from specviz.training.teacher_text import read_prompt_file

from .conftest import target_greedy

pytestmark = [pytest.mark.slow]

PROMPT = "Explain what a hash table is and why it is fast."


@pytest.fixture(scope="module")
def pair(embedded) -> ModelPair:
    return load_pair(DecodeConfig(device="cpu"))


def test_the_default_pair_is_the_embedded_target_and_its_shipped_draft(pair, embedded):
    config = DecodeConfig()
    assert (config.target, config.drafter, config.draft_spec) == (EMBEDDED, "model", "embedded-draft")
    # the pair shares the process's one loaded target (the session's ``embedded`` may have been evicted from the
    # bounded model cache by the many tiny models other test modules load)
    assert pair.target is load_model(EMBEDDED, "cpu") and pair.draft.spec == "embedded-draft"
    assert pair.draft.tokenizer.get_vocab() == pair.target.tokenizer.get_vocab()
    draft_config = pair.draft.model.config
    manifest = json.loads(MANIFEST_FILE.read_text())
    assert draft_config.hidden_size == pair.target.model.config.hidden_size
    assert draft_config.num_hidden_layers == len(manifest["layers_from_target"]) < pair.target.num_layers
    assert pair.draft.vocab_ranking.recommended == manifest["draft_vocab"]
    # each shipped matrix is int8 rows of its change from the target layer the manifest names
    with safe_open(str(WEIGHTS_FILE), framework="pt") as f:
        assert f.metadata()["layers_from_target"] == ",".join(map(str, manifest["layers_from_target"]))
    stored = load_file(str(WEIGHTS_FILE))
    start = layer_state(pair.target.model.state_dict(), manifest["layers_from_target"])
    name = "model.layers.1.mlp.down_proj.weight"
    assert stored[name].dtype == torch.int8
    assert torch.equal(
        pair.draft.model.state_dict()[name], start[name] + stored[name].float() * stored[name + ROW_SCALE][:, None]
    )
    # the draft's embedding and tied head are the target's own
    assert torch.equal(pair.draft.model.get_input_embeddings().weight, pair.target.model.get_input_embeddings().weight)


def test_shipped_files_are_small_and_the_manifest_says_how_they_were_made():
    assert WEIGHTS_FILE.stat().st_size < 30e6
    manifest = json.loads(MANIFEST_FILE.read_text())
    for field in (
        "command",
        "seed",
        "steps",
        "response_tokens",
        "final_loss",
        "heldout_greedy_acceptance",
        "draft_vocab",
    ):
        assert field in manifest, field
    assert manifest["command"].startswith("python -m specviz train-draft")


def test_materialised_directory_is_a_standard_checkpoint_with_the_same_logits(pair):
    directory = embedded_draft_dir()
    plain = AutoModelForCausalLM.from_pretrained(str(directory), use_safetensors=True, trust_remote_code=False).eval()
    use_kernels(plain, kernels_of(pair.draft.model))  # the same matrix kernels: the same checkpoint gives equal logits
    ids = torch.tensor([pair.target.tokenizer("The capital of France is")["input_ids"]])
    with torch.inference_mode():
        assert torch.allclose(plain(ids).logits, pair.draft.model(ids).logits, atol=1e-5)


@pytest.fixture(scope="module")
def reference(pair) -> tuple[list[int], list[int]]:
    """The prompt's ids and the target's own greedy 24 tokens (transformers' generate), computed once."""
    ids = encode_prompt(pair.target.tokenizer, PROMPT, True)
    return ids, target_greedy(pair.target, ids, 24)


@pytest.mark.parametrize("gamma,draft_vocab", [(2, None), (4, None), (6, None), (4, 0), (3, 1024)])
def test_greedy_with_the_shipped_draft_is_identical_to_the_targets_generate(pair, reference, gamma, draft_vocab):
    config = DecodeConfig(gamma=gamma, draft_vocab=draft_vocab, max_new_tokens=24, device="cpu")
    trace = speculative_decode(config, prompt=PROMPT, pair=pair)
    assert trace.prompt_ids == reference[0] and trace.output_ids == reference[1]
    expected_k = {None: pair.draft.vocab_ranking.recommended, 0: pair.vocab_size}.get(draft_vocab, draft_vocab)
    assert trace.models["draft_vocab"] == expected_k


def test_the_cli_with_drafter_model_and_no_draft_runs_the_shipped_draft(pair, reference, tmp_path):
    out = tmp_path / "trace.json"
    assert (
        main(
            [
                "trace",
                "--target",
                "embedded",
                "--drafter",
                "model",
                "--prompt",
                PROMPT,
                "--max-new-tokens",
                "24",
                "--device",
                "cpu",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    trace = json.loads(out.read_text())
    assert trace["config"]["draft"] in (None, "") and trace["models"]["draft"] == pair.draft.name
    assert trace["models"]["draft_vocab"] == pair.draft.vocab_ranking.recommended
    assert trace["output_ids"] == reference[1]  # greedy: the target's own text


def test_a_trimmed_head_gives_zero_q_outside_its_tokens(pair):
    config = DecodeConfig(draft_vocab=1024, rule="sample", device="cpu")
    trace = speculative_decode(config.replace(max_new_tokens=12), prompt=PROMPT, pair=pair)
    allowed = set(pair.draft.vocab_ranking.order[:1024].tolist())
    for rnd in trace.rounds:
        for pos in rnd.draft:
            assert pos.token_id in allowed and set(pos.draft_top.ids) <= allowed


@pytest.mark.parametrize("draft_vocab", [0, 1024])
def test_sampling_with_the_shipped_draft_follows_p(pair, draft_vocab):
    """The engine's sampling rule on the shipped draft's real q (full or trimmed): first tokens drawn as the
    engine draws them (x ~ q, check, residual) follow p; the power check: the same test rejects q itself,
    and the computed power of that rejection at this n is near 1."""
    n = 1000
    ids = encode_prompt(pair.target.tokenizer, "Name a colour.", True)
    with torch.inference_mode():
        p = softmax32(pair.target.model(torch.tensor([ids])).logits[0, -1])
    forward = draft_forward_for(draft_vocab, pair.draft)
    logits = forward(pair.draft, ids, DynamicCache(), 0, 1)[-1]
    rule = SpeculativeSamplingRule()
    q = rule.draft_distribution(logits)
    assert chi_square_power(q, p, n, level=1e-6) > 0.999
    generator = torch.Generator().manual_seed(0)
    draws = []
    for _ in range(n):
        x = rule.draft_token(q, generator)
        draws.append(x if rule.check(x, p, q, generator).accepted else rule.correction(p, q, generator))
    assert goodness_of_fit(draws, p) > 1e-3
    assert goodness_of_fit(draws, q) < 1e-6


def test_held_out_greedy_acceptance_shows_the_shipped_draft_is_the_trained_one(pair):
    prompts = read_prompt_file(HELDOUT_FILE)[:3]
    config = DecodeConfig(gamma=4, max_new_tokens=32, top_n=1, device="cpu")
    traces = [speculative_decode(config, prompt=p, pair=pair) for p in prompts]
    verified = [pos for t in traces for r in t.rounds for pos in r.draft if pos.status != "not_verified"]
    # a cut of these layers before training agrees with the target on ~0% of tokens; the draft trained on
    # 0.85M tokens of teacher text: 0.41 here; 2 epochs on 6.2M tokens: 0.48; the shipped one (6 epochs): 0.56
    assert sum(p.accepted for p in verified) / len(verified) >= 0.5


def test_the_head_size_comparison_reports_the_trace_of_each_head(pair):
    """The Gamma sweep page's "Compare head sizes" table: one row per K, whose alpha is that K's own trace."""
    config = DecodeConfig(gamma=2, max_new_tokens=8, top_n=1, device="cpu")
    ids = prompt_ids_for(pair, config, PROMPT, None)
    table = sweep.vocab_sweep(config, pair, ids, sizes=(512, 0))
    assert list(table.draft_vocab) == [512, pair.vocab_size]
    assert (table.cost_ratio > 0).all() and table.alpha.between(0, 1).all()
    trimmed = speculative_decode(config.replace(draft_vocab=512, drafter="model"), prompt_ids=ids, pair=pair)
    assert table.alpha[0] == pytest.approx(trimmed.stats.alpha_estimate)
    head = set(pair.draft.vocab_ranking.order[:512].tolist())
    assert all(pos.token_id in head for r in trimmed.rounds for pos in r.draft)


def test_loading_the_default_pair_trains_nothing():
    """The app's start-up path (load_pair on the defaults) reads the shipped weights and never imports training code."""
    probe = (
        "import sys; from specviz.config import DecodeConfig; from specviz.engine import load_pair; "
        "load_pair(DecodeConfig(device='cpu')); "
        "print([m for m in ('specviz.training.draft_model', 'specviz.training.distillation', "
        "'specviz.training.teacher_text', 'specviz.training.parallel_drafters') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "[]"


def test_a_draft_for_another_vocabulary_is_refused_with_a_message(tiny_dirs):
    with pytest.raises(VocabularyMismatchError, match="different tokenizers"):
        load_pair(DecodeConfig(target=tiny_dirs["target"], draft="embedded-draft", drafter="model", device="cpu"))


def test_bad_draft_settings_get_clear_messages(tiny_dirs, tiny_pair):
    with pytest.raises(ConfigError, match="needs a draft model"):
        DecodeConfig(target=tiny_dirs["target"], drafter="model").validated()
    with pytest.raises(ConfigError, match="draft_vocab"):
        DecodeConfig(draft_vocab=-5).validated()
    config = DecodeConfig(
        target=tiny_dirs["target"], draft=tiny_dirs["draft"], drafter="model", draft_vocab=16, device="cpu"
    )
    with pytest.raises(ConfigError, match="frequency ranking"):
        speculative_decode(config, prompt_ids=[3, 7, 5], pair=tiny_pair)
    assert load_model(tiny_dirs["draft"], "cpu").vocab_ranking is None
