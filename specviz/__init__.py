"""specviz: see and teach speculative decoding with real draft and target models.

The package is pure Python + torch; only :mod:`specviz.ui` imports streamlit.
"""

__version__ = "0.1.0"

from pathlib import Path

DATA_DIR = Path(__file__).parent / "data"  # prompt files and pinned hashes (package data)
WEIGHTS_DIR = Path(__file__).parent / "weights"  # the shipped drafters' weights (package data)
