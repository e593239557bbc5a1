"""A lecture hall without browsers: N sessions over Streamlit's own websocket protocol, on one or more replicas.

Usage: ``.venv/bin/python -m benchmarks.load_client [--scenario hall|phases] [--sessions 300] [--replicas 2]
[--seeds 60] [--kill] [--start specviz-app|streamlit-run] [--gc]``

Each session opens ``ws://HOST:PORT/_stcore/stream`` (subprotocol "streamlit"), sends one ``BackMsg`` asking
for a script run with the link's query string and page, and reads ``ForwardMsg``s: the first server message,
the first contentful paint (the delta whose new element is the page's main view: the round view's player, an iframe)
and the end of the run (``script_finished``). Messages are parsed as protobuf and only the element's type is
looked at; no text conversion and no keepalive pings, so the client stays cheap (its own CPU time is
printed). Sessions are spread round robin over the replicas' ports. With two replicas a ``redis-server`` is
started and both share it (``SPECVIZ_REDIS_URL``). Phases: one link (trace not computed yet), the same link
again (stored), N different seeds, a mix of pages; ``--kill`` kills the replica holding a computation's lock
mid-run. ``--scenario hall`` is the lecture hall as an independent client measured it (issue 38): a teacher opens
``?prompt=Hi&max_new_tokens=4`` (the models load), then N sessions open one link nobody computed yet,
``?prompt=Give three reasons why cats sleep so much.&max_new_tokens=32``, all at once, then N again (stored).
Per phase: first contentful paint p50 / p95 / max, errors, CPU seconds of every replica (/proc), computations
(from the replicas' logs) and the client's CPU. Bounded: at most 1,000 sessions, each at most ``--timeout``
seconds. A benchmark, not a test: nothing is asserted; the figures are printed from one run.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import sys
import time
from pathlib import Path
from urllib.parse import urlencode

import redis

from specviz.serving.processes import RedisServer, Server, app_command, free_port
from specviz.ui.session_client import PAINT, Session, link, run_sessions

CHECKOUT = Path(__file__).resolve().parent.parent
SESSIONS_MAX = 1000
TEACHER_WARM_UP = urlencode({"prompt": "Hi", "max_new_tokens": 4})
HALL_LINK = urlencode({"prompt": "Give three reasons why cats sleep so much.", "max_new_tokens": 32})


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


async def phase(name: str, servers: list[Server], links: list[tuple[str, str]], timeout_s: float) -> list[Session]:
    cpu = [s.cpu_seconds() if s.process.poll() is None else 0.0 for s in servers]
    logged = [len(s.computations()) for s in servers]
    client = resource.getrusage(resource.RUSAGE_SELF)
    started = time.monotonic()
    results = await run_sessions([s.port for s in servers], links, timeout_s)
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_SELF)
    painted = [r.paint_s for r in results if r.paint_s is not None]
    await asyncio.sleep(0.5)  # the replicas' logs are read on other threads
    computed = [c for s, n in zip(servers, logged) for c in s.computations()[n:]]
    server_cpu = [(s.cpu_seconds() - c) if s.process.poll() is None else float("nan") for s, c in zip(servers, cpu)]
    fmt = lambda x: "-" if x is None else f"{x:.2f}"
    first = [r.first_s for r in results if r.first_s is not None]
    ended = [r.end_s for r in results if r.end_s is not None]
    print(
        f"| {name} | {len(links)} | {len(painted)} | {sum(r.error is not None for r in results)} | "
        f"{fmt(percentile(first, 0.5))} | "
        f"{fmt(percentile(painted, 0.5))} / {fmt(percentile(painted, 0.95))} / {fmt(max(painted, default=None))} | "
        f"{fmt(percentile(ended, 0.95))} | "
        f"{' + '.join(f'{x:.1f}' for x in server_cpu)} | {len(computed)} | "
        f"{(after.ru_utime + after.ru_stime) - (client.ru_utime + client.ru_stime):.1f} | {wall:.1f} |",
        flush=True,
    )
    if computed:
        each = sum(seconds for _, seconds, _ in computed) / len(computed)
        print(
            f"    one trace {each:.2f} s on average; {len(computed)} traces over {len(servers)} worker(s): "
            f"{len(computed) * each / len(servers):.1f} s of queue",
            flush=True,
        )
    errors = {r.error for r in results if r.error}
    if errors:
        print(f"    errors: {sorted(errors)[:3]}", flush=True)
    return results


async def kill_phase(servers: list[Server], share_url: str, sessions: int, tokens: int, timeout_s: float) -> None:
    """Start a new link on every replica, kill the replica whose lock it is once it computes, and see the others'
    sessions painted (after the lock's expiry, by a survivor)."""
    client = redis.Redis.from_url(share_url)
    links = [(link(999_999, tokens), "")] * sessions
    running = asyncio.ensure_future(phase("kill the lock's owner mid-run", servers, links, timeout_s))
    owner = None
    while owner is None and not running.done():
        held = [client.get(k) for k in client.scan_iter("specviz:lock:*")]
        owner = next((v.decode() for v in held if v), None)
        await asyncio.sleep(0.1)
    if owner is not None:
        pid = int(owner.split(":")[1])
        victim = next(s for s in servers if s.process.pid == pid)
        await asyncio.sleep(1.0)  # mid-run
        victim.process.kill()
        print(f"    killed replica {servers.index(victim)} (pid {pid}) while it held the lock", flush=True)
    results = await running
    survivors = [r for r in results if owner is None or servers[r.replica].process.poll() is None]
    print(
        f"    surviving replicas' sessions painted: {sum(r.paint_s is not None for r in survivors)} of "
        f"{len(survivors)}",
        flush=True,
    )


def serve_command(args: argparse.Namespace) -> list[str]:
    """How each replica is started: ``specviz app`` (the package's main script, the options as flags) or a plain
    ``streamlit run app.py`` in the checkout (Streamlit reads ``.streamlit/config.toml``); ``--gc`` turns Streamlit's
    full garbage collection after every script run back on."""
    start = app_command() if args.start == "specviz-app" else [sys.executable, "-m", "streamlit", "run", "app.py"]
    return [*start, *(["--runner.postScriptGC=true"] if args.gc else [])]


async def main(args: argparse.Namespace) -> None:
    share = RedisServer(maxmemory="256mb") if args.replicas > 1 else None
    # replicas on one machine split its cores: torch's threads in each, else they oversubscribe and spin
    threads = str(max(1, (os.cpu_count() or 1) // args.replicas))
    env = {"OMP_NUM_THREADS": threads, **({"SPECVIZ_REDIS_URL": share.url} if share else {})}
    servers = [Server(free_port(), env=env, serve=serve_command(args), cwd=CHECKOUT) for _ in range(args.replicas)]
    try:
        for server in servers:
            server.wait_healthy()
        print(
            f"{args.replicas} replica(s){' sharing one redis-server' if share else ''}; {args.sessions} sessions; "
            f"{args.tokens} tokens; embedded default pair; scenario {args.scenario}; started by {args.start}; "
            f"Streamlit's collection after each run {'on' if args.gc else 'as configured (off)'}"
        )
        print(
            "| phase | sessions | painted | errors | first message p50 (s) | FCP p50 / p95 / max (s) "
            "| run ended p95 (s) | server CPU s per replica | traces computed | client CPU s | wall s |"
        )
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        if args.scenario == "hall":
            await phase(
                "teacher's warm-up (?prompt=Hi&max_new_tokens=4)",
                servers,
                [(TEACHER_WARM_UP, "")] * len(servers),
                args.timeout,
            )
            await phase("the hall: one link, not computed", servers, [(HALL_LINK, "")] * args.sessions, args.timeout)
            await phase("the hall: one link, stored", servers, [(HALL_LINK, "")] * args.sessions, args.timeout)
            return
        await phase(
            "warm-up (each replica loads the models)",
            servers,
            [(link(1, args.tokens), "")] * len(servers),
            args.timeout,
        )
        one = [(link(2, args.tokens), "")] * args.sessions
        await phase("one link, trace not computed", servers, one, args.timeout)
        await phase("one link, trace stored", servers, one, args.timeout)
        await phase(
            f"{args.seeds} different seeds",
            servers,
            [(link(100 + i, args.tokens), "") for i in range(args.seeds)],
            args.timeout,
        )
        pages = list(PAINT)
        await phase(
            "mix of pages, one link",
            servers,
            [(link(2, args.tokens), pages[i % len(pages)]) for i in range(args.sessions)],
            args.timeout,
        )
        if args.kill and share:
            await kill_phase(servers, share.url, min(args.sessions, 40), args.tokens, args.timeout)
    finally:
        for server in servers:
            server.stop()
        if share:
            share.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", choices=("phases", "hall"), default="phases")
    parser.add_argument("--sessions", type=int, default=300)
    parser.add_argument("--replicas", type=int, default=1, choices=(1, 2, 3, 4))
    parser.add_argument("--seeds", type=int, default=30, help="sessions in the different-seeds phase")
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds a session may take")
    parser.add_argument("--start", choices=("specviz-app", "streamlit-run"), default="specviz-app")
    parser.add_argument("--gc", action="store_true", help="Streamlit's full collection after every run, on")
    parser.add_argument("--kill", action="store_true", help="with 2+ replicas: kill the lock's owner mid-run")
    arguments = parser.parse_args()
    if not 1 <= arguments.sessions <= SESSIONS_MAX or not 1 <= arguments.seeds <= SESSIONS_MAX:
        parser.error(f"--sessions and --seeds must be 1..{SESSIONS_MAX}")
    asyncio.run(main(arguments))
