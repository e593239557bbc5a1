"""specviz's Streamlit main script: ``streamlit run app.py`` serves the app from a checkout, every page a file in
``pages/`` beside it and the options in ``.streamlit/config.toml``.

The code is in the package: :mod:`specviz.ui.app` (which ``specviz app`` serves from an installed wheel, with the
same options), each page's in ``specviz/ui/pages/``; the files here only start them, so no page is written twice.
"""

from specviz.ui.app import main

main()
