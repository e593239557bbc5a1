"""The bounds on one request's work and the choices a setting offers (no torch, no specviz imports): what
:class:`~specviz.config.DecodeConfig`'s settings accept, the names of the shipped pair's models, and the lesson's
prompts (the app's presets, the CLI lesson's default)."""

from collections.abc import Callable

EMBEDDED, EMBEDDED_DRAFT = "embedded", "embedded-draft"  # the shipped pair's model specs


def shipped_weights_fit(on_target_states: bool, target: str, own_weights: str | None) -> bool:
    """Whether a drafter can draft for ``target``: one drafting on the target's states (EAGLE, blockwise and [MASK]
    heads) ships weights trained on the embedded target only, unless the user gives weights of their own."""
    return not on_target_states or target == EMBEDDED or bool(own_weights)


TREE_NODES_MAX = 256  # drafted tokens per tree: one target pass scores them all, so keep it bounded

GAMMA_MAX = 16  # more drafted tokens per round than this never pays and crowds the round view
MAX_NEW_TOKENS_MAX = 512  # bounds one request's work so a single user cannot hold the machine
PROMPT_TOKENS_MAX = 2048  # a longer prompt is refused with a message, not truncated silently
TOP_N_MAX = 50
# a costly button's work: sized by the machine profile to about BUTTON_BUDGET_S (analysis.common.units_in_budget),
# within these bounds
BUTTON_BUDGET_S = 15.0  # a costly button's default work, in seconds predicted from the machine profile
SWEEP_GAMMAS_MAX = 8  # block sizes per sweep
SWEEP_TOKENS_MAX = 64  # new tokens per sweep run (and per decode of the drafters' and head sizes' comparisons)
SWEEP_PAIRS = 3  # cycles of (target alone, each speculative γ) timed per sweep at most, medians
TIMING_REPEATS_MAX = 20  # repeats of the Parallel verification page's timing
ENGINE_REPORT_BYTES_MAX = 5_000_000  # a pasted or uploaded engine report: a whole /metrics page is ~100 kB
DTYPES = ("float32", "bfloat16", "float16", "int8", "int4")
DRAFT_DTYPES = (None, "float32", "bfloat16", "int8", "int4")  # None: the target's precision
DRAFT_VOCAB_CHOICES = (None, 1024, 2048, 4096, 8192, 16384, 32768, 0)  # None: as the draft ships; 0: every token


def vocab_label(k: int | None) -> str:
    return "as shipped" if k is None else "all tokens" if k == 0 else f"top {k:,} tokens"


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
    "Translation (too hard for the 135M model)": (
        "Translate to English: Machen sich Hunderte Millionen von Autofahrern Sorgen über ihre Privatsphäre?"
    ),
}
# The opening example: sensible code, both verdicts in its rounds, and γ visibly changes them (greedy, 32 tokens,
# embedded pair: 14 rounds and 18/27 drafted tokens accepted at γ = 2, 13 and 19/36 at γ = 3, 10 and 22/35 at γ = 4,
# 9 and 23/58 at γ = 8). The Fibonacci preset accepts every drafted token at γ = 3: a lesson shows no rejection there.
DEFAULT_PROMPT = PROMPT_PRESETS["Code: SQL"]

# How a computation reports its progress: ``done`` of ``total`` steps as it goes; a page's bar and a shared job's
# waiting sessions draw it.
Progress = Callable[[int, int], None]  # on_progress(done, total)
TextProgress = Callable[[int, int, str], None]  # on_progress(done, total, what runs now)
JobProgress = Callable[..., None]  # a shared job's: on_progress(done, total, text=None), either of the above
