"""The decoding configuration: one frozen record, validated in one place.

Every entry point (CLI, app, URL query parameters) builds a :class:`DecodeConfig` and calls
:meth:`DecodeConfig.validated`, so a bad value always meets the same clear message.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

EMBEDDED, EMBEDDED_DRAFT = "embedded", "embedded-draft"  # the shipped pair's model specs
DRAFTERS = ("model", "layerskip", "ngram", "tree", "blockwise", "maskquery")
PARALLEL_DRAFTERS = ("blockwise", "maskquery")  # one small pass on the target's states (seed 003)
TREE_MODES = ("constant", "beam")  # RSD-C (constant branching) | RSD-S (stochastic beam search)
TREE_NODES_MAX = 256  # drafted tokens per tree: one target pass scores them all, so keep it bounded
RULES = ("greedy", "sample", "topbeta")

GAMMA_MAX = 16  # more drafted tokens per round than this never pays and crowds the round view
BETA_MAX = 10  # SpecDec uses beta <= 5; 10 leaves room to show how lossy large beta gets
MAX_NEW_TOKENS_MAX = 512  # bounds one request's work so a single user cannot hold the machine
PROMPT_TOKENS_MAX = 2048  # a longer prompt is refused with a message, not truncated silently
TOP_N_MAX = 50


class ConfigError(ValueError):
    """A configuration value is out of range or malformed; the message names the field."""


@dataclass(frozen=True)
class DecodeConfig:
    """Everything that determines a trace (together with the prompt)."""

    target: str = EMBEDDED  # model spec: "embedded", a hub id, or a save_pretrained directory
    draft: str | None = None  # draft model spec; None with the embedded target: the shipped embedded draft
    drafter: str = "model"  # model | layerskip | ngram | tree | blockwise | maskquery
    draft_vocab: int | None = None  # FR-Spec: the draft's head over its K most frequent tokens; 0 = all; None = its shipped choice
    rule: str = "greedy"  # greedy | sample | topbeta
    gamma: int = 4  # drafted tokens per round (block size)
    beta: int = 3  # top-beta: a draft token must be among the target's beta best (SpecDec)
    tau: float = 5.0  # top-beta: max log p(top1) - log p(token) (SpecDec's tolerance)
    temperature: float = 1.0  # sample rule: applied to both p and q; 0 means argmax
    top_k: int = 0  # sample rule: keep the k most likely tokens (0 = off)
    top_p: float = 1.0  # sample rule: nucleus mass (1 = off)
    seed: int = 0  # seeds every random draw, so a config reproduces its trace
    max_new_tokens: int = 32
    chat_template: bool = True  # wrap a text prompt in the tokenizer's chat template if it has one
    skip_layers: tuple[int, ...] | None = None  # layer-skip drafter; None = the model's default set
    exit_threshold: float = 0.0  # layer-skip adaptive draft exit: stop when top-1 q < this (0 = off)
    ngram_max: int = 3  # n-gram lookup: longest suffix matched against earlier text
    tree_mode: str = "constant"  # tree drafter: RSD-C "constant" branching or RSD-S "beam" (stochastic beam search)
    branching: int = 2  # tree drafter, RSD-C: children per node
    tree_depth: int = 3  # tree drafter: draft iterations (levels)
    beam_width: int = 4  # tree drafter, RSD-S: nodes kept per level
    parallel_weights: str | None = None  # blockwise / maskquery: a trained weights file (None: the shipped one)
    top_n: int = 10  # how many top tokens of each distribution a trace records
    device: str = "auto"  # auto | cpu | cuda | cuda:N

    def validated(self) -> "DecodeConfig":
        """Return self if every field is in range, else raise :class:`ConfigError`."""
        _check(self.drafter in DRAFTERS, f"drafter must be one of {', '.join(DRAFTERS)}; got {self.drafter!r}")
        _check(self.rule in RULES, f"rule must be one of {', '.join(RULES)}; got {self.rule!r}")
        _check(bool(str(self.target).strip()), "target model must not be empty")
        _check(
            self.drafter != "model" or bool(self.draft_spec),
            "drafter 'model' needs a draft model (--draft); only the embedded target has a built-in one",
        )
        if self.draft_vocab is not None:
            _check_int("draft_vocab", self.draft_vocab, 0, 10**7)
        _check_int("gamma", self.gamma, 1, GAMMA_MAX)
        _check_int("beta", self.beta, 1, BETA_MAX)
        _check_int("max_new_tokens", self.max_new_tokens, 1, MAX_NEW_TOKENS_MAX)
        _check_int("top_k", self.top_k, 0, 10**7)
        _check_int("seed", self.seed, 0, 2**63 - 1)
        _check_int("ngram_max", self.ngram_max, 1, 8)
        _check_int("top_n", self.top_n, 1, TOP_N_MAX)
        _check(self.tree_mode in TREE_MODES, f"tree_mode must be one of {', '.join(TREE_MODES)}; got {self.tree_mode!r}")
        _check_int("branching", self.branching, 1, 8)
        _check_int("tree_depth", self.tree_depth, 1, GAMMA_MAX)
        _check_int("beam_width", self.beam_width, 1, 32)
        _check(self.tree_nodes() <= TREE_NODES_MAX,
               f"the draft tree would have {self.tree_nodes()} nodes; the limit is {TREE_NODES_MAX} (lower branching or depth)")
        _check_float("tau", self.tau, 0.0, math.inf)
        _check_float("temperature", self.temperature, 0.0, 100.0)
        _check(_is_number(self.top_p) and 0.0 < self.top_p <= 1.0, f"top_p must be in (0, 1]; got {self.top_p!r}")
        _check_float("exit_threshold", self.exit_threshold, 0.0, 1.0)
        if self.skip_layers is not None:
            _check(all(isinstance(i, int) and i >= 0 for i in self.skip_layers), "skip_layers must be layer indices >= 0")
        return self

    @property
    def draft_spec(self) -> str | None:
        """The draft model to load: the one named, else the shipped embedded draft for the embedded
        target's draft-model drafter (trees without a named draft use the layer-skip self-draft)."""
        if self.draft and str(self.draft).strip():
            return str(self.draft).strip()
        return EMBEDDED_DRAFT if self.drafter == "model" and self.target == EMBEDDED else None

    def tree_nodes(self) -> int:
        """Drafted tokens per round of the tree drafter: sum of b^k (RSD-C) or width x depth (RSD-S)."""
        if self.tree_mode == "beam":
            return self.beam_width * self.tree_depth
        return sum(self.branching**k for k in range(1, self.tree_depth + 1))

    def replace(self, **changes) -> "DecodeConfig":
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["skip_layers"] = list(self.skip_layers) if self.skip_layers is not None else None
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "DecodeConfig":
        d = dict(d)
        if d.get("skip_layers") is not None:
            d["skip_layers"] = tuple(d["skip_layers"])
        return cls(**d)


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)


def _check_int(name: str, value, low: int, high: int) -> None:
    _check(
        isinstance(value, int) and not isinstance(value, bool) and low <= value <= high,
        f"{name} must be an integer in [{low}, {high}]; got {value!r}",
    )


def _check_float(name: str, value, low: float, high: float) -> None:
    ok = _is_number(value) or (value == math.inf and high == math.inf)
    _check(ok and low <= value <= high, f"{name} must be a number in [{low}, {high}]; got {value!r}")
