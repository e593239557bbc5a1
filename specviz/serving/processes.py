"""The processes that serve a class: the app (``specviz app``: streamlit on the packaged main script with the
options in ``ui/streamlit.toml``), and, for the tests and load benchmarks, app replicas and a ``redis-server`` on
loopback ports, each stopped after, with their CPU seconds read from /proc and the computations they logged."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import threading
import time
import tomllib
import urllib.request
from pathlib import Path

UI = Path(__file__).resolve().parent.parent / "ui"
APP_SCRIPT = UI / "app.py"  # streamlit's main script; the pages are in pages/ beside it
STREAMLIT_OPTIONS = UI / "streamlit.toml"  # the checkout's .streamlit/config.toml (a link to it), packaged
# the flags the tests and benchmarks launch Debian's chromium with (headless on a loopback server, nothing fetched)
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
COMPUTED = re.compile(r"computed (Decoding) (\w+) in ([\d.]+) s for (\d+) session")
STARTED = re.compile(r" started (.+) \w+ for \d+ session")  # the work pool's line as a computation starts


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far (/proc/PID/stat, fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def streamlit_flags(options: Path = STREAMLIT_OPTIONS) -> list[str]:
    """The server options of a streamlit config file as ``streamlit run`` flags (``--section.key=value``), so the
    app runs with them from any directory (streamlit itself reads only ``./.streamlit/config.toml``)."""
    sections = tomllib.loads(options.read_text(encoding="utf-8"))
    return [
        f"--{section}.{key}={str(value).lower() if isinstance(value, bool) else value}"
        for section, values in sections.items()
        for key, value in values.items()
    ]


def app_command(*streamlit_args: str, app: Path = APP_SCRIPT) -> list[str]:
    """The command line that serves ``app`` (the specviz app by default) with the app's streamlit options."""
    return [sys.executable, "-m", "streamlit", "run", str(app), *streamlit_flags(), *streamlit_args]


def serve_app(streamlit_args: list[str]) -> None:
    """Replace this process with streamlit serving the packaged app (signals then reach the server itself)."""
    command = app_command(*streamlit_args)
    os.execv(command[0], command)


class Server:
    """The app served on a loopback port, its log read in the background (``env`` adds variables, e.g. a Redis
    URL); ``app`` another main script (a benchmark's bare page); ``serve`` another command that takes streamlit's
    options (an installed ``specviz app``), run in ``cwd``."""

    def __init__(
        self,
        port: int,
        app: Path = APP_SCRIPT,
        env: dict[str, str] | None = None,
        serve: list[str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        env = {**os.environ, "SPECVIZ_DEVICE": "cpu", "SPECVIZ_LOG_LEVEL": "INFO", **(env or {})}
        self.process = subprocess.Popen(
            [*(serve or app_command(app=app)), "--server.port", str(port), "--server.address", "127.0.0.1"],
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.port, self.url = port, f"http://127.0.0.1:{port}"
        self.lines: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None, "the server's output is a pipe"
        for line in self.process.stdout:
            self.lines.append(line.rstrip())

    def wait_healthy(self) -> None:
        while True:
            try:
                if urllib.request.urlopen(f"{self.url}/_stcore/health", timeout=2).status == 200:
                    return
            except OSError:
                if self.process.poll() is not None:
                    raise RuntimeError("streamlit exited:\n" + "\n".join(self.lines[-30:])) from None
                time.sleep(0.5)

    def cpu_seconds(self) -> float:
        return cpu_seconds(self.process.pid)

    def computations(self) -> list[tuple[str, float, int]]:
        """(key digest, seconds, sessions) of every trace this server computed, in order."""
        return [(m[2], float(m[3]), int(m[4])) for m in map(COMPUTED.search, list(self.lines)) if m]

    def started(self, since: int = 0) -> list[str]:
        """The labels of the computations this server started after its log line ``since``."""
        return [m[1] for m in map(STARTED.search, self.lines[since:]) if m]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


class RedisServer:
    """Debian's ``redis-server`` on a free loopback port, nothing saved to disk, LRU eviction past ``maxmemory``."""

    def __init__(self, maxmemory: str | None = None) -> None:
        self.port = free_port()
        limit = ["--maxmemory", maxmemory, "--maxmemory-policy", "allkeys-lru"] if maxmemory else []
        self.process = subprocess.Popen(
            [
                "redis-server",
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                *limit,
            ],
            stdout=subprocess.DEVNULL,
        )
        self.url = f"redis://127.0.0.1:{self.port}/0"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.05)
        raise RuntimeError("redis-server did not start")

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)
