"""What serves a class, without streamlit: the models loaded once per process and this machine's defaults
(``models``), the work pool every session shares (``pool``, ``sharedwork``, ``jobs``), the finished results kept by
size (``store``) and shared with replicas on Redis (``redisshare``, ``jsoncodec``), the configuration in a link
(``urlstate``), and the processes that serve the app (``processes``: ``specviz app``, replicas and Redis for tests
and load benchmarks). See docs/scaling.md."""
