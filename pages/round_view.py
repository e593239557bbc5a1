"""Round view: runs specviz/ui/pages/round_view.py, the page's code."""

from specviz.ui.navigation import run_page

run_page(__file__)
