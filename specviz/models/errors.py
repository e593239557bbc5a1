"""The errors a model spec can raise; their messages are shown to the user as they are."""


class ModelLoadError(RuntimeError):
    """A model spec could not be turned into a model; the message says which and why."""


class VocabularyMismatchError(ValueError):
    """Draft and target do not map tokens to the same ids, so a draft token means nothing to the target."""
