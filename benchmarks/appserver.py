"""The processes a load benchmark drives: ``streamlit run app.py`` replicas and a ``redis-server``, on loopback
ports, each stopped after; their CPU seconds read from /proc and the computations they logged."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COMPUTED = re.compile(r"computed (Decoding) (\w+) in ([\d.]+) s for (\d+) session")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far (/proc/PID/stat, fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Server:
    """``streamlit run app.py`` with its log read in the background (``env`` adds variables, e.g. a Redis URL)."""

    def __init__(self, port: int, app: Path = ROOT / "app.py", env: dict[str, str] | None = None) -> None:
        env = {**os.environ, "SPECVIZ_DEVICE": "cpu", "SPECVIZ_LOG_LEVEL": "INFO", **(env or {})}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "streamlit", "run", str(app), "--server.port", str(port),
             "--server.address", "127.0.0.1", "--server.headless", "true", "--browser.gatherUsageStats", "false"],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.port, self.url, self.lines = port, f"http://127.0.0.1:{port}", []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
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
        self.process = subprocess.Popen(["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                                         "--appendonly", "no", *limit], stdout=subprocess.DEVNULL)
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
