"""The models a run uses: loading (embedded, published, hub), the embedded draft's cut, the pair shared by every
session, and the machine profile (what each model's passes cost here). What runs their passes is
:mod:`specviz.runtime`'s."""
