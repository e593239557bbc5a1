"""The draft's training pipeline on a tiny target: cached teacher text, distillation, the frequency ranking."""

from __future__ import annotations

import statistics

import torch
from safetensors import safe_open

from specviz.models.embedded_draft import (
    ROW_SCALE,
    SHARED_WEIGHTS,
    cut_model,
    layer_state,
    quantised_rows,
    restored_state,
    save_shipped,
    stored_tensors,
)
from specviz.training.distillation import TrainSettings, distil, response_rows
from specviz.training.draft_model import HELDOUT_FILE, TEMPLATE_PROMPTS, answer_ids, prompt_files, vocab_ranking
from specviz.training.teacher_text import generate_teacher_text, read_prompt_file

TINY_PROMPTS = [" ".join(f"w{(5 * i + j) % 30}" for j in range(4 + i % 3)) for i in range(10)]


def test_the_held_out_prompts_are_in_no_training_file():
    files = prompt_files()
    assert files[0] == TEMPLATE_PROMPTS and len(files) >= 3  # the templates, then every seed's self-written requests
    trained = {p for path in files for p in read_prompt_file(path)}
    heldout = read_prompt_file(HELDOUT_FILE)
    assert len(trained) > 4000 and heldout and not trained & set(heldout)


def test_teacher_text_is_cached_per_temperature_and_read_back(tiny_pair, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path))
    made = generate_teacher_text(
        tiny_pair.target,
        TINY_PROMPTS,
        new_tokens=8,
        temperatures=[0.0, 0.7],
        seed=0,
        top_k=6,
        batch_size=4,
        progress=False,
    )
    files = sorted(tmp_path.glob("teacher-text/*/*.safetensors"))
    assert len(made) == len(files) == 2 * 3  # 10 prompts in batches of 4, at two temperatures
    read = generate_teacher_text(
        tiny_pair.target,
        TINY_PROMPTS,
        new_tokens=8,
        temperatures=[0.0, 0.7],
        seed=0,
        top_k=6,
        batch_size=4,
        progress=False,
    )
    assert all(
        torch.equal(a.ids, b.ids) and torch.allclose(a.top_logp, b.top_logp, atol=1e-2) for a, b in zip(made, read)
    )
    greedy = made[0]  # the greedy answer's token is the teacher's top-1 at every response step
    for row in range(greedy.ids.shape[0]):
        prompt, total = int(greedy.prompt_lens[row]), int(greedy.total_lens[row])
        assert greedy.ids[row, prompt:total].tolist() == greedy.top_ids[row, : total - prompt, 0].tolist()


def test_distilling_a_cut_of_the_target_lowers_the_divergence(tiny_pair, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path))
    batches = generate_teacher_text(
        tiny_pair.target, TINY_PROMPTS, new_tokens=12, temperatures=[0.0], seed=0, top_k=8, batch_size=5, progress=False
    )
    settings = TrainSettings(layers=(0, 3), epochs=30, rows_per_step=4, lr=3e-3, warmup=5)
    draft, losses = distil(tiny_pair.target, batches, settings, progress=False)
    assert len(losses) == int(30 * len(response_rows(batches)) / 4)
    assert draft.config.num_hidden_layers == 2
    assert statistics.mean(losses[-5:]) < 0.5 * statistics.mean(losses[:5])
    vocab = tiny_pair.target.model.config.vocab_size
    ranking = vocab_ranking(answer_ids(batches), vocab)
    assert sorted(ranking.tolist()) == list(range(vocab))  # every id once, the most generated first
    generated = [
        t
        for b in batches
        for r in range(b.ids.shape[0])
        for t in b.ids[r, int(b.prompt_lens[r]) : int(b.total_lens[r])].tolist()
    ]
    assert generated.count(int(ranking[0])) == max(generated.count(t) for t in set(generated))


def test_shipped_matrices_are_int8_changes_from_the_start_layers_and_restore_within_half_a_step(tiny_pair, tmp_path):
    target = tiny_pair.target.model
    start = layer_state(target.state_dict(), [0, 3])
    assert torch.equal(
        start["model.layers.1.mlp.up_proj.weight"], target.state_dict()["model.layers.3.mlp.up_proj.weight"]
    )
    draft = cut_model(target, [0, 3]).float()
    torch.manual_seed(0)
    with torch.no_grad():  # training moves each matrix by a fraction of its norm
        for name, value in draft.named_parameters():
            if name in start and value.ndim == 2:
                value.add_(0.3 * value.abs().mean() * torch.randn_like(value))
    stored = stored_tensors(draft, start)
    restored = restored_state(stored, start)
    trained = draft.state_dict()
    for name, value in restored.items():
        if name + ROW_SCALE in stored:
            assert stored[name].dtype == torch.int8
            step = stored[name + ROW_SCALE][:, None]
            assert ((value - trained[name].float()).abs() <= step / 2 + 1e-7).all(), name
            _, own_scale = quantised_rows(trained[name])  # rounding the change is finer than rounding the matrix
            assert step.mean() < 0.6 * own_scale.mean(), name
        else:
            assert stored[name].dtype == torch.float16 and torch.allclose(value, trained[name].float(), atol=1e-2)
    assert set(restored) == {name for name in trained if name not in SHARED_WEIGHTS}
    untouched = stored_tensors(cut_model(target, [0, 3]).float(), start)  # no change from the start: exactly the start
    assert all(
        torch.equal(v, start[n].float())
        for n, v in restored_state(untouched, start).items()
        if n in start and v.ndim == 2
    )
    path = tmp_path / "draft.safetensors"
    save_shipped(stored, [0, 3], torch.arange(target.config.vocab_size), {"draft_vocab": 16}, path)
    with safe_open(str(path), framework="pt") as f:
        assert f.metadata()["layers_from_target"] == "0,3" and f.metadata()["num_hidden_layers"] == "2"
        assert f.get_tensor("vocab_order").dtype == torch.int32
