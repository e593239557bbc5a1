"""Compare rules: runs specviz/ui/pages/compare_rules.py, the page's code."""

from specviz.ui.navigation import run_page

run_page(__file__)
