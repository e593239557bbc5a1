"""What a trace looks like: the round's HTML (``render``), the lesson player that steps rounds in the
browser (``player``), token tables (``tables``) and the teaching pages' plotly charts (``figures``,
``verification_figures``, ``drafter_figures``). Pure functions of trace records and page tables; no streamlit."""
