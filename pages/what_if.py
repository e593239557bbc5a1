"""What if: two settings: runs specviz/ui/pages/what_if.py, the page's code."""

from specviz.ui.navigation import run_page

run_page(__file__)
