"""The bounds on one request's work and the choices a setting offers (no torch, no specviz imports): what
:class:`~specviz.config.DecodeConfig`'s settings accept, and the names of the shipped pair's models."""

EMBEDDED, EMBEDDED_DRAFT = "embedded", "embedded-draft"  # the shipped pair's model specs
TREE_NODES_MAX = 256  # drafted tokens per tree: one target pass scores them all, so keep it bounded

GAMMA_MAX = 16  # more drafted tokens per round than this never pays and crowds the round view
MAX_NEW_TOKENS_MAX = 512  # bounds one request's work so a single user cannot hold the machine
PROMPT_TOKENS_MAX = 2048  # a longer prompt is refused with a message, not truncated silently
TOP_N_MAX = 50
DTYPES = ("float32", "bfloat16", "float16")
DRAFT_DTYPES = (None, "float32", "bfloat16", "int8")  # None: the target's precision
DRAFT_VOCAB_CHOICES = (None, 1024, 2048, 4096, 8192, 16384, 32768, 0)  # None: as the draft ships; 0: every token


def vocab_label(k: int | None) -> str:
    return "as shipped" if k is None else "all tokens" if k == 0 else f"top {k:,} tokens"
