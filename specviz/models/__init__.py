"""Running the models: loading (embedded, published, hub), the embedded draft's cut, forward passes
with KV caches (full, layer-skip, FR-Spec heads, a lean Llama/Qwen2 layer loop), the on-disk cache."""
