"""specviz's Streamlit main script: ``streamlit run app.py`` serves the app from a checkout, every page a file in
``pages/`` beside it and the options in ``.streamlit/config.toml``.

The code is in the package: :mod:`specviz.ui.app` (which ``specviz app`` serves from an installed wheel, with the
same options), each page's in ``specviz/ui/pages/``; the files here only start them, so no page is written twice.
Streamlit runs this file as ``__main__`` for every page run; ``streamlit run app.py`` first imports it to find the
server it assigns, ``app`` (``st.App``: Streamlit's own, with :mod:`specviz.ui.nested_paths`'s middleware, so a
typed nested path opens the app instead of a blank page).
"""

import streamlit as st

from specviz.ui.app import main
from specviz.ui.nested_paths import MIDDLEWARE

if __name__ == "__main__":
    main()
else:
    app = st.App(__file__, middleware=MIDDLEWARE)
