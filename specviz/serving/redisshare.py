"""Replicas sharing one store: results and the single-flight lock in Redis (``SPECVIZ_REDIS_URL``).

Two app processes (on one machine or several, behind a load balancer with websocket session affinity)
asked for the same key compute it once between them: the first takes the key's lock (``SET NX PX``, the
pattern of Redis' own single-instance lock recipe), computes, stores the result as JSON
(:mod:`specviz.serving.jsoncodec`; never pickle) and releases the lock; the others wait for the result. The lock
has an expiry, renewed by the owner while it computes, so a replica that dies mid-run frees it within
``lock_ttl_s`` and a waiting replica computes instead. Results carry no expiry: Redis bounds them itself
(``maxmemory`` with ``allkeys-lru`` evicts the least recently used; a lock evicted that way costs at
most a second computation, never a wrong result). A result with no JSON form stays in its own process.
"""

from __future__ import annotations

import hashlib
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Hashable
from typing import Any

import redis

from specviz.serving import jsoncodec

log = logging.getLogger(__name__)
LOCK_TTL_S = 10.0  # a dead owner's lock is free again after this; the living owner renews it every third
POLL_S = 0.2  # how often a waiting replica looks for the result
# delete / renew the lock only while this process still owns it (one atomic step each)
RELEASE = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end"
RENEW = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end"


def redis_key(kind: str, key: Hashable) -> str:
    """``specviz:<kind>:<sha256 of the key>``: the same name in every process for the same key."""
    return f"specviz:{kind}:{hashlib.sha256(repr(key).encode()).hexdigest()}"


class RedisShare:
    """The cross-process half of :class:`specviz.serving.sharedwork.SharedWork`: stored results and single-flight."""

    def __init__(self, url: str, lock_ttl_s: float = LOCK_TTL_S, poll_s: float = POLL_S) -> None:
        self.client = redis.Redis.from_url(url)
        self.lock_ttl_ms, self.poll_s = int(lock_ttl_s * 1000), poll_s
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.release, self.renew = self.client.register_script(RELEASE), self.client.register_script(RENEW)

    def get(self, key: Hashable) -> Any | None:
        raw = self.client.get(redis_key("result", key))
        return None if raw is None else jsoncodec.loads(raw)

    def claim(self, key: Hashable, value: Any) -> Any:
        """``value`` stored as ``key``'s result where no process stored one (Redis's SET NX), and the result that
        stands: the first claim, from whichever replica made it."""
        self.client.set(redis_key("result", key), jsoncodec.dumps(value), nx=True)
        return self.get(key)

    def busy(self, key: Hashable) -> bool:
        """Whether some process holds ``key``'s lock (computes it now)."""
        return bool(self.client.exists(redis_key("lock", key)))

    def compute_once(
        self, key: Hashable, compute: Callable[[], Any], on_wait: Callable[[], None] = lambda: None
    ) -> Any:
        """``key``'s result, computed by ``compute`` here only if no process has it or is computing it; while
        another process computes, wait for its result (``on_wait`` is called once) or for its lock to go."""
        result_key, lock_key = redis_key("result", key), redis_key("lock", key)
        waited = False
        while True:
            stored = self.get(key)
            if stored is not None:
                return stored
            if self.client.set(lock_key, self.owner, nx=True, px=self.lock_ttl_ms):
                return self._compute_holding(result_key, lock_key, compute)
            if not waited:
                on_wait()
                waited = True
            while self.client.exists(lock_key) and not self.client.exists(result_key):
                time.sleep(self.poll_s)  # the owner finishes, fails, or dies and its lock expires

    def _compute_holding(self, result_key: str, lock_key: str, compute: Callable[[], Any]) -> Any:
        done = threading.Event()
        renewer = threading.Thread(target=self._renew_until, args=(lock_key, done), daemon=True)
        renewer.start()
        try:
            result = compute()
            try:
                self.client.set(result_key, jsoncodec.dumps(result))
            except TypeError as exc:
                log.info("result not shared between replicas: %s", exc)
            return result
        finally:
            done.set()
            self.release(keys=[lock_key], args=[self.owner])

    def _renew_until(self, lock_key: str, done: threading.Event) -> None:
        while not done.wait(self.lock_ttl_ms / 3000):
            self.renew(keys=[lock_key], args=[self.owner, self.lock_ttl_ms])
