"""The ``hf`` policy backend: a transformers causal LM with marti's own decoding loop.

Why not ``model.generate``: one shared random stream per batch makes a request's samples
depend on its batch neighbours, and stop strings, per-token log-probs and finish reasons
would need post-hoc reconstruction. The loop here is the plain KV-cached one ``generate``
runs (prefill the left-padded batch, then one token per step), with:

- **Left padding** and explicit ``position_ids`` (``cumsum(mask) - 1``), so a padded prompt
  sees the same positions as unpadded.
- **Per-sample random streams.** Sample ``j`` of a request with ``SamplingParams.seed=s``
  draws one uniform per token from its own ``torch.Generator``, seeded by a hash of
  ``(s, j, prompt tokens)``; the token is the inverse CDF of that uniform under the
  (temperature-scaled, top-p-truncated) distribution. A sample's text therefore depends
  only on ``(s, j)``, the prompt and the weights, not on batch size or neighbours, up to
  the floating-point differences that padding and batch shape cause in the forward pass:
  in fp32 these did not change a single token in our checks (SmolLM2, 48 tokens, alone vs
  in a batch of 8); in bf16 they flip some token in most 48-token samples, after which the
  texts diverge. With a seed (or greedy), repeating a call repeats its output exactly.
  Sample ``j`` of two identical prompts with the same seed is the same completion (as in
  vLLM). With ``seed=None`` the per-sample seeds are drawn from the policy's own generator
  (seeded by ``HFPolicy(seed=)``).
- **Log-probs** from the processed logits of the step (see :class:`Generation`): in
  float32, ``log_softmax(logits / T)`` renormalised over the top-p nucleus; greedy
  (``T == 0``) reports the untempered ``log_softmax(logits)``.
- **Stop strings** are matched on the decoded completion after each token; generation of that
  sample ends at the token that completes the match.

Requests are sorted by prompt length and run in chunks of ``batch_size`` samples (``n``
samples of a prompt are separate rows). LoRA adapters (one per agent on the shared base)
are PEFT adapters injected into the model; ``generate(..., adapter=name)`` activates one.
"""

from __future__ import annotations

import contextlib
import gc
import secrets
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel

from marti_trainer.attention import resolve_attention
from marti_trainer.kv_cache import cache_kwargs, output_cache
from marti_trainer.models import resolve_model
from marti_trainer.policies.base import (
    Generation,
    Message,
    Policy,
    PolicyError,
    SamplingParams,
    run_grouped,
    tokenize_prompts,
    validate_prompts,
)
from marti_trainer.policies.capabilities import (
    ContinuousBatching,
    DoneCallback,
    GeneratesEach,
)
from marti_trainer.policies.hf_continuous import ContinuousDriver
from marti_trainer.policies.hf_decode import (
    Row,
    eval_mode,
    match_stop,
    prefill,
    sample_seed,
    sample_tokens,
    to_generation,
    tokenize_one,
)
from marti_trainer.precision import native_dtype

__all__ = ["HFPolicy", "hf_generate_each"]

_DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32}


class HFPolicy(Policy, GeneratesEach, ContinuousBatching):
    """A transformers causal LM as a :class:`Policy`.

    Args:
        model: a model alias, local directory or Hub id (resolved with
            :func:`marti_trainer.models.resolve_model`), or an already loaded
            ``PreTrainedModel``, which is used as is (not copied, cast or moved:
            ``load_weights`` and ``add_adapter`` then modify it).
        dtype: ``"bfloat16"`` or ``"float32"`` weights. None means, for a path, the dtype
            ``rollout.dtype: auto`` picks for ``device``
            (:func:`marti_trainer.precision.native_dtype`: bfloat16 where the GPU or CPU has
            native bf16, else float32, since emulated bf16 is many times slower), and for a
            loaded model its own dtype (an explicit dtype must then match it).
        device: torch device for a model loaded from a path (``"cpu"``, ``"cuda:0"``...).
        batch_size: rows (prompt x sample) decoded together, >= 1.
        seed: seeds the policy's generator, which draws per-sample seeds when
            ``SamplingParams.seed`` is None: two policies built with the same seed and called
            the same way give the same completions.
        tokenizer: tokenizer or its directory; defaults to the model's directory.
        max_context_tokens: context length in tokens; defaults to the model's
            ``max_position_embeddings`` and may not exceed it.
        num_threads: if set, ``torch.set_num_threads(num_threads)`` (process-wide). On a CPU
            shared with other busy processes, fewer threads than cores avoids the
            oversubscription that made decoding ~10x slower in our measurements.
        attn_implementation: the attention kernel of a model loaded from a path
            (:func:`marti_trainer.attention.resolve_attention`: ``auto`` is the
            grouped-query kernel on a CPU, ``sdpa`` on a GPU).
    """

    def __init__(
        self,
        model: str | Path | Any,
        dtype: Literal["bfloat16", "float32"] | None = None,
        device: str | torch.device = "cpu",
        batch_size: int = 32,
        seed: int | None = None,
        *,
        tokenizer: Any | str | Path | None = None,
        max_context_tokens: int | None = None,
        num_threads: int | None = None,
        attn_implementation: str = "auto",
    ) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be an int >= 1, got {batch_size!r}")
        if num_threads is not None:
            if isinstance(num_threads, bool) or not isinstance(num_threads, int) or num_threads < 1:
                raise ValueError(f"num_threads must be an int >= 1 or None, got {num_threads!r}")
            torch.set_num_threads(num_threads)
        if dtype is not None and dtype not in _DTYPES:
            raise ValueError(f"dtype must be one of {sorted(_DTYPES)} or None, got {dtype!r}")

        if isinstance(model, PreTrainedModel):
            if dtype is not None and model.dtype != _DTYPES[dtype]:
                raise ValueError(
                    f"dtype={dtype!r} but the given model is {model.dtype}; a loaded model is "
                    f"used as is: cast it yourself or pass dtype=None"
                )
            self._model = model
            source = getattr(model, "name_or_path", None)
        else:
            source = resolve_model(model)
            self._model = AutoModelForCausalLM.from_pretrained(
                source,
                dtype=_DTYPES[dtype or native_dtype(torch.device(device))],
                local_files_only=True,
                attn_implementation=resolve_attention(attn_implementation, device),
            ).to(device)
            self._model.eval()

        if tokenizer is None:
            if not source:
                raise ValueError("pass tokenizer= when the model has no name_or_path directory")
            tokenizer = source
        if isinstance(tokenizer, (str, Path)):
            tokenizer = AutoTokenizer.from_pretrained(tokenizer, local_files_only=True)
        if not getattr(tokenizer, "chat_template", None):
            raise ValueError("the tokenizer has no chat template; HFPolicy renders chat prompts")
        self._tokenizer = tokenizer

        limit = int(getattr(self._model.config, "max_position_embeddings", 0) or 0)
        if max_context_tokens is None:
            if limit <= 0:
                raise ValueError("the model config has no max_position_embeddings: pass it")
            max_context_tokens = limit
        if max_context_tokens < 2 or (limit and max_context_tokens > limit):
            raise ValueError(
                f"max_context_tokens must be in [2, {limit or 'inf'}] (the model's "
                f"max_position_embeddings), got {max_context_tokens}"
            )
        self._max_context = int(max_context_tokens)
        self._batch_size = batch_size
        # Without a seed, OS entropy: the global torch RNG is neither consumed nor relied on.
        self._rng = torch.Generator().manual_seed(
            seed if seed is not None else secrets.randbits(62)
        )
        self._eos_ids = self._collect_eos_ids()
        self._pad_id = self._pick_pad_id()
        self._peft: Any = None  # peft.PeftModel once an adapter is added
        self._closed = False

    # ------------------------------------------------------------------ properties
    @property
    def tokenizer(self) -> Any:
        return self._tokenizer

    @property
    def max_context_tokens(self) -> int:
        return self._max_context

    @property
    def model(self) -> Any:
        """The underlying ``PreTrainedModel`` (with LoRA layers injected once adapters exist)."""
        self._check_open()
        return self._model

    @property
    def eos_ids(self) -> frozenset[int]:
        """Token ids that end a completion (the model's and the tokenizer's end of sequence)."""
        return self._eos_ids

    @property
    def pad_id(self) -> int:
        """The token id padding uses (the pad token, else end of sequence, else 0)."""
        return self._pad_id

    @property
    def adapters(self) -> tuple[str, ...]:
        """Names of the registered LoRA adapters."""
        return tuple(self._peft.peft_config) if self._peft is not None else ()

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
        if adapter is not None and adapter not in self.adapters:
            raise ValueError(
                f"unknown adapter {adapter!r}; registered: {list(self.adapters)} "
                f"(add one with add_adapter)"
            )
        if not prompts:
            return []
        prompt_ids = tokenize_prompts(self._tokenizer, prompts, params, self._max_context)
        rows = self.make_rows(prompt_ids, params)
        # Prompts that start alike side by side: a batch prefills their shared prefix once.
        order = sorted(range(len(rows)), key=lambda r: rows[r].prompt_ids)
        was_training = self._model.training  # a shared trainer model may be in train mode
        self._model.eval()
        try:
            with self.use_adapter(adapter), torch.inference_mode():
                for start in range(0, len(order), self._batch_size):
                    self._decode_chunk(
                        [rows[r] for r in order[start : start + self._batch_size]], params
                    )
        finally:
            self._model.train(was_training)

        result: list[list[Generation]] = [[] for _ in prompts]
        for row in rows:  # rows are in (request, sample) order
            result[row.request].append(to_generation(self._tokenizer, row))
        return result

    def generate_each(
        self,
        prompts: Sequence[Sequence[Message]],
        params: Sequence[SamplingParams],
        adapter: str | None = None,
    ) -> list[Generation]:
        """One completion per prompt, each sampled with its own parameters (``n == 1``).

        Requests that differ only by ``seed`` and ``max_tokens`` share one batched decode
        (every row has its own random stream and token budget), so ``result[i]`` equals
        ``generate([prompts[i]], params[i], adapter)[0][0]`` up to the floating-point effect
        of a different padding.

        Raises:
            ValueError: lengths differ, ``n != 1``, bad prompts, an unknown adapter.
            PromptTooLongError, PolicyError: as :meth:`generate`, indices into ``prompts``.
        """
        if any(p.n != 1 for p in params):
            raise ValueError("generate_each samples one completion per prompt: use n=1")
        return run_grouped(
            prompts,
            params,
            lambda p: replace(p, seed=None, max_tokens=1),
            lambda sub_prompts, sub_params: hf_generate_each(
                self, sub_prompts, sub_params, adapter
            ),
        )

    def continuous_driver(self, on_done: DoneCallback, max_rows: int) -> ContinuousDriver:
        """A rollout driver with iteration-level batching over this policy (requests join and
        leave the running decode batch at every token step): see
        :mod:`marti_trainer.policies.hf_continuous`. ``on_done(request, generation, error)``
        is called from the driver's worker thread; nothing else may use this policy while
        the driver is open."""
        return ContinuousDriver(self, on_done, max_rows)

    def make_rows(
        self, prompt_ids: list[list[int]], params: SamplingParams, first_request: int = 0
    ) -> list[Row]:
        """A :class:`Row` per sample of each prompt (request ``first_request + i`` for
        ``prompt_ids[i]``), seeded as ``generate`` seeds them (from ``params.seed``, else from
        this policy's own generator), with its token budget."""
        rows = []
        for i, ids in enumerate(prompt_ids):
            budget = min(params.max_tokens, self._max_context - len(ids))
            for j in range(params.n):
                generator = None
                if not params.greedy:
                    if params.seed is not None:
                        row_seed = sample_seed(params.seed, j, ids)
                    else:
                        row_seed = int(torch.randint(0, 2**62, (), generator=self._rng).item())
                    generator = torch.Generator().manual_seed(row_seed)
                rows.append(Row(first_request + i, j, ids, budget, generator))
        return rows

    def _decode_chunk(self, rows: list[Row], params: SamplingParams) -> None:
        """Decode one batch; re-raise backend failures as PolicyError naming its requests."""
        try:
            self._decode(rows, params)
        except (PolicyError, KeyboardInterrupt):
            raise
        except Exception as exc:
            indices = sorted({row.request for row in rows})
            raise PolicyError(
                f"HF generation failed for request(s) {indices}: {type(exc).__name__}: {exc}",
                indices,
            ) from exc

    def _decode(self, rows: list[Row], params: SamplingParams) -> None:
        """Generate every row of one batch to completion (fills the rows in place)."""
        device = self._model.device
        batch = len(rows)
        cache, mask, positions, logits = prefill(
            self._model, [r.prompt_ids for r in rows], self._pad_id
        )
        max_steps = max(r.budget for r in rows)
        for _ in range(max_steps):
            active = [r.finish is None for r in rows]
            tokens, logprobs = sample_tokens(logits, rows, active, params)
            for b, row in enumerate(rows):
                if not active[b]:
                    continue
                token = int(tokens[b])
                row.tokens.append(token)
                row.logprobs.append(float(logprobs[b]))
                if token in self._eos_ids or match_stop(self._tokenizer, row, params.stop):
                    row.finish = "stop"
                elif len(row.tokens) >= row.budget:
                    row.finish = "length"
            if all(r.finish is not None for r in rows):
                break
            next_ids = torch.tensor(
                [r.tokens[-1] if r.tokens else self._pad_id for r in rows], dtype=torch.long
            ).unsqueeze(1)
            mask = torch.cat([mask, mask.new_ones((batch, 1))], dim=1)
            positions = positions + 1
            out = self._model(
                input_ids=next_ids.to(device),
                attention_mask=mask,
                position_ids=positions,
                use_cache=True,
                **cache_kwargs(cache),
            )
            cache = output_cache(out)
            logits = out.logits[:, -1, :]

    # ------------------------------------------------------------------ weights
    def load_weights(self, source: Mapping[str, torch.Tensor] | str | Path) -> None:
        """Copy new base-model weights into the model in place (see :meth:`Policy.load_weights`).

        Names are the plain HF ones (``model.layers.0.self_attn.q_proj.weight``) even when
        LoRA adapters are loaded. Tensors are cast to each parameter's dtype and device. All
        names and shapes are checked before anything is copied. Accepts a state dict or a
        directory of ``*.safetensors`` (or ``pytorch_model*.bin``) files.

        Raises:
            ValueError: unknown names, shape mismatches, or a directory without weights.
        """
        self._check_open()
        targets = self._base_tensors()
        entries = (
            dict(source.items())
            if isinstance(source, Mapping)
            else dict(_checkpoint_entries(Path(source)))
        )
        unknown = sorted(set(entries) - set(targets))
        if unknown:
            raise ValueError(
                f"load_weights: {len(unknown)} unknown parameter name(s), e.g. {unknown[:5]}; "
                f"expected names like {sorted(targets)[:3]}"
            )
        for name, value in entries.items():
            shape = tuple(value.shape)
            if shape != tuple(targets[name].shape):
                raise ValueError(
                    f"load_weights: {name} has shape {shape}, the model expects "
                    f"{tuple(targets[name].shape)}"
                )
        with torch.no_grad():
            for name, value in entries.items():
                targets[name].copy_(value.to(dtype=targets[name].dtype))

    def _base_tensors(self) -> dict[str, torch.Tensor]:
        """Plain HF name -> the live tensor, skipping LoRA weights."""
        tensors = {}
        for name, tensor in self._model.state_dict(keep_vars=True).items():
            if "lora_" in name:
                continue
            tensors[name.replace(".base_layer.", ".")] = tensor
        return tensors

    # ------------------------------------------------------------------ adapters
    def add_adapter(self, name: str, path: str | Path) -> None:
        """Load the PEFT LoRA adapter saved in ``path`` under ``name`` (needs ``peft``).

        Adapters share the base weights; ``generate(..., adapter=name)`` uses one, ``None``
        the bare base model. Adding an existing name again replaces that adapter's weights in
        place (the LoRA config must be the same), which is how a trainer syncs an updated
        adapter.

        Raises:
            ValueError: empty name or a path without ``adapter_config.json``.
            ImportError: ``peft`` is not installed.
        """
        self._check_open()
        if not isinstance(name, str) or not name:
            raise ValueError(f"adapter name must be a non-empty str, got {name!r}")
        path = Path(path)
        if not (path / "adapter_config.json").is_file():
            raise ValueError(f"{path} is not a PEFT adapter directory (no adapter_config.json)")
        try:
            # peft is optional: needed only for LoRA adapters
            from peft import PeftModel
            from peft.utils import load_peft_weights, set_peft_model_state_dict
        except ImportError as exc:
            raise ImportError("LoRA adapters need peft: pip install peft") from exc
        with warnings.catch_warnings():
            # peft 0.21 calls an API transformers 5 deprecated; not actionable here.
            warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*")
            if self._peft is None:
                self._peft = PeftModel.from_pretrained(self._model, path, adapter_name=name)
            elif name in self._peft.peft_config:
                weights = load_peft_weights(str(path), device=str(self._model.device))
                set_peft_model_state_dict(self._peft, weights, adapter_name=name)
            else:
                self._peft.load_adapter(path, adapter_name=name)
        self._peft.eval()

    def use_adapter(self, adapter: str | None) -> Any:
        """A context in which the model runs with ``adapter`` (None: the bare base model)."""
        if self._peft is None:
            return contextlib.nullcontext()
        if adapter is None:
            return self._peft.disable_adapter()
        self._peft.set_adapter(adapter)
        return contextlib.nullcontext()

    # ------------------------------------------------------------------ lifecycle
    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._model = None
        self._peft = None
        gc.collect()

    def _check_open(self) -> None:
        if self._closed:
            raise PolicyError("this HFPolicy is closed")

    def _collect_eos_ids(self) -> frozenset[int]:
        ids: set[int] = set()
        for source in (getattr(self._model, "generation_config", None), self._model.config):
            value = getattr(source, "eos_token_id", None) if source is not None else None
            if isinstance(value, int):
                ids.add(value)
            elif isinstance(value, (list, tuple)):
                ids.update(int(v) for v in value)
        if self._tokenizer.eos_token_id is not None:
            ids.add(int(self._tokenizer.eos_token_id))
        return frozenset(ids)

    def _pick_pad_id(self) -> int:
        for value in (self._tokenizer.pad_token_id, self._tokenizer.eos_token_id):
            if value is not None:
                return int(value)
        return 0


def hf_generate_each(
    policy: HFPolicy,
    prompts: Sequence[Sequence[Message]],
    params: Sequence[SamplingParams],
    adapter: str | None = None,
) -> list[Generation]:
    """``HFPolicy.generate`` with one ``SamplingParams`` per prompt, as one static batch.

    The parameters must agree on everything but ``seed`` and ``max_tokens`` (``n == 1``).
    Rows are sorted by prompt tokens and decoded in chunks of the policy's ``batch_size``, as
    ``generate`` does; each row samples from its own stream with its own token budget, so
    ``result[i]`` equals ``policy.generate([prompts[i]], params[i], adapter)[0][0]``.

    Raises:
        ValueError: parameters that differ otherwise, bad prompts, an unknown adapter.
        PromptTooLongError, PolicyError: as ``HFPolicy.generate`` (indices into ``prompts``).
    """
    policy._check_open()
    validate_prompts(prompts)
    base = params[0]
    shared = (base.temperature, base.top_p, base.stop, base.truncate_prompt)
    if any(
        p.n != 1 or (p.temperature, p.top_p, p.stop, p.truncate_prompt) != shared for p in params
    ):
        raise ValueError(
            "hf_generate_each: parameters must have n=1 and differ only by seed and max_tokens"
        )
    if adapter is not None and adapter not in policy.adapters:
        raise ValueError(f"unknown adapter {adapter!r}; registered: {list(policy.adapters)}")
    ctx = policy.max_context_tokens
    rows = [
        policy.make_rows([tokenize_one(policy.tokenizer, prompt, p, ctx, i)], p, i)[0]
        for i, (prompt, p) in enumerate(zip(prompts, params, strict=True))
    ]
    order = sorted(range(len(rows)), key=lambda r: rows[r].prompt_ids)
    size = policy._batch_size
    with eval_mode(policy.model), policy.use_adapter(adapter), torch.inference_mode():
        for start in range(0, len(order), size):
            policy._decode_chunk([rows[r] for r in order[start : start + size]], base)
    return [to_generation(policy.tokenizer, row) for row in rows]


def _checkpoint_entries(folder: Path) -> Iterator[tuple[str, torch.Tensor]]:
    """Yield (name, tensor) for every weight in a checkpoint directory (loaded on the CPU)."""
    if not folder.is_dir():
        raise ValueError(f"load_weights: {folder} is not a directory")
    files = sorted(p for p in folder.glob("*.safetensors") if p.name != "adapter_model.safetensors")
    if files:
        for file in files:
            yield from load_file(str(file), device="cpu").items()
        return
    bins = sorted(folder.glob("pytorch_model*.bin"))
    if not bins:
        raise ValueError(f"load_weights: no *.safetensors or pytorch_model*.bin in {folder}")
    for file in bins:
        yield from torch.load(file, map_location="cpu", weights_only=True).items()
