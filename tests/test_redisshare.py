"""Replicas sharing one store through a real Redis (Debian's redis-server, started here on a loopback port)."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass

import pandas as pd
import pytest

from specviz.analysis.paired import PairedTimes
from specviz.engine import speculative_decode
from specviz.serving import jsoncodec
from specviz.serving.processes import RedisServer
from specviz.serving.redisshare import RedisShare, redis_key
from specviz.serving.sharedwork import SharedWork

from .test_engine import PROMPT, tiny_config

pytestmark = [
    pytest.mark.redis,
    pytest.mark.slow,
    pytest.mark.skipif(
        shutil.which("redis-server") is None, reason="redis-server is not installed (scripts/test installs Debian's)"
    ),
]


@pytest.fixture
def redis_url(request):
    """A fresh redis-server on a free loopback port (``maxmemory`` from the test's marker, LRU eviction)."""
    marker = request.node.get_closest_marker("maxmemory")
    server = RedisServer(marker.args[0] if marker else None)
    yield server.url
    server.stop()


REPLICA = textwrap.dedent("""
    import json, sys, time
    from specviz.serving.redisshare import RedisShare
    share = RedisShare(sys.argv[1], lock_ttl_s=float(sys.argv[3]))
    def compute():
        share.client.incr("computed")
        time.sleep(float(sys.argv[2]))
        return {"answer": 42, "by": share.owner}
    print(json.dumps(share.compute_once("the lesson's trace", compute)), flush=True)
""")


def replica(url: str, seconds: float, ttl: float = 10.0) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", REPLICA, url, str(seconds), str(ttl)], stdout=subprocess.PIPE, text=True
    )


def test_two_processes_on_one_key_compute_once(redis_url):
    first, second = replica(redis_url, 1.5), replica(redis_url, 1.5)
    results = [json.loads(p.communicate()[0]) for p in (first, second)]
    assert results[0] == results[1] and results[0]["answer"] == 42  # both got the one run's result
    assert int(RedisShare(redis_url).client.get("computed")) == 1


def test_a_replica_killed_mid_run_frees_the_key_for_another(redis_url):
    owner = replica(redis_url, 600, ttl=2.0)
    share, lock = RedisShare(redis_url), redis_key("lock", "the lesson's trace")
    ttls = []  # the lock's remaining milliseconds, watched until the owner has renewed it once
    for _ in range(6000):
        ttls.append(share.client.pttl(lock))
        if ttls[-1] > 0 and max(ttls[:-1], default=-1) > 0 and ttls[-1] > min(t for t in ttls[:-1] if t > 0):
            break
        time.sleep(0.05)
    assert owner.poll() is None and ttls[-1] > min(t for t in ttls[:-1] if t > 0)  # renewed while computing
    waiter = replica(redis_url, 0.1, ttl=2.0)
    owner.send_signal(signal.SIGKILL)
    owner.wait()
    result = json.loads(waiter.communicate(timeout=600)[0])  # after the dead owner's lock expired
    assert result["answer"] == 42 and int(share.client.get("computed")) == 2


def test_a_waiter_computes_after_a_dead_owners_lock_expires(redis_url):
    share, waits = RedisShare(redis_url), []
    share.client.set(redis_key("lock", "k"), "a replica that died", px=600)
    started = time.monotonic()
    assert share.compute_once("k", lambda: "computed here", lambda: waits.append(1)) == "computed here"
    assert time.monotonic() - started >= 0.5 and waits == [1] and not share.busy("k")


def test_a_trace_round_trips_through_redis(redis_url, tiny_dirs, tiny_pair):
    trace = speculative_decode(
        tiny_config(tiny_dirs, rule="sample", gamma=3, max_new_tokens=12), prompt_ids=PROMPT, pair=tiny_pair
    )
    RedisShare(redis_url).compute_once(("trace", 1), lambda: trace)
    assert RedisShare(redis_url).get(("trace", 1)) == trace  # another process's view: JSON, never pickle


def test_two_pools_sharing_redis_compute_a_key_once(redis_url):
    """Two replicas' work pools (here in one process) asked for one key: one computes, both get the result."""
    calls = []

    def compute(on_progress):
        calls.append(1)
        time.sleep(0.5)
        return {"rounds": 7}

    pools = [SharedWork(1 << 20, 1, shared=RedisShare(redis_url)) for _ in range(2)]
    jobs = [pool.submit(("trace", "one link"), compute, f"student-{i}", "Decoding") for i, pool in enumerate(pools)]
    for job in jobs:
        assert job.finished.wait(600)
    assert [job.result for job in jobs] == [{"rounds": 7}] * 2 and len(calls) == 1
    assert all(pool.known(("trace", "one link")) for pool in pools)
    assert sorted(job.computed_here for job in jobs) == [False, True]  # the other received the result


@pytest.mark.maxmemory("2mb")
def test_the_store_evicts_under_maxmemory(redis_url):
    share = RedisShare(redis_url)
    for i in range(60):
        share.compute_once(("big", i), lambda: "x" * 100_000)
    assert share.get(("big", 59)) == "x" * 100_000  # the newest is kept
    assert sum(share.get(("big", i)) is None for i in range(60)) >= 30  # the least recently used went
    assert share.client.info("memory")["used_memory"] < 4 * 2**20


@dataclass
class NotOurs:
    x: int


def test_the_codec_keeps_kinds_and_builds_nothing_foreign():
    frame = pd.DataFrame({"gamma": [1, 2], "speedup": [1.1, 0.9]})
    value = {"table": frame, "pair": (1, "two"), "times": PairedTimes([1], [2], [0.5], [0.4]), "none": None}
    back = jsoncodec.loads(jsoncodec.dumps(value))
    assert back["table"].equals(frame) and back["pair"] == (1, "two") and back["times"] == value["times"]
    with pytest.raises(TypeError):
        jsoncodec.dumps(NotOurs(1))  # a class outside specviz has no JSON form
    forged = json.dumps({"kind": "dataclass", "class": "subprocess:Popen", "fields": {}})
    with pytest.raises(ValueError):
        jsoncodec.loads(forged)
