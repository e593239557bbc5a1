"""specviz: see and teach speculative decoding with real draft and target models.

The package is pure Python + torch; only :mod:`specviz.ui` imports streamlit.
"""

__version__ = "0.1.0"
