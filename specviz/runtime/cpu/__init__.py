"""The CPU integer runtime behind the reference forwards: int8 products (:mod:`~specviz.runtime.cpu.int8`), int4
products in groups of 32 (:mod:`~specviz.runtime.cpu.int4`) and a published GGUF's own Q4_K blocks
(:mod:`~specviz.runtime.cpu.q4k`), attention one query row at a time (:mod:`~specviz.runtime.cpu.row_attention`), an
int4 model's decoder layers in C (:mod:`~specviz.runtime.cpu.int4_layers`), oneDNN's packed float kernels
(:mod:`~specviz.runtime.cpu.kernel_paths`), weights' file-backed pages (:mod:`~specviz.runtime.cpu.mapped_pages`),
and the C kernels' one header, build and binding (:mod:`~specviz.runtime.cpu.compiled`)."""
