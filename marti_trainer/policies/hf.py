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

import gc
import hashlib
import secrets
import warnings
from array import array
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import torch

from marti_trainer.kv_cache import cache_kwargs, cache_layers, output_cache
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
from marti_trainer.prompt_tree import prompt_tree

__all__ = ["HFPolicy"]

_DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32}
_MASK64 = (1 << 64) - 1


def _splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x ^= x >> 30
    x = (x * 0xBF58476D1CE4E5B9) & _MASK64
    x ^= x >> 27
    x = (x * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def _sample_seed(seed: int, sample: int, prompt_ids: Sequence[int]) -> int:
    """A 63-bit seed for sample ``sample`` of a prompt under ``SamplingParams.seed=seed``.

    The prompt's tokens are hashed in so different prompts get independent streams (a shared
    stream would couple their samples through the shared uniforms); position in the batch is
    not, so the result does not depend on batch composition.
    """
    digest = hashlib.blake2b(array("q", prompt_ids).tobytes(), digest_size=8).digest()
    x = _splitmix64(seed & _MASK64)
    x = _splitmix64(x ^ sample)
    x = _splitmix64(x ^ int.from_bytes(digest, "little"))
    return x & ((1 << 63) - 1)


@dataclass
class _Row:
    """One sample being generated: sample ``sample`` of request ``request``."""

    request: int
    sample: int
    prompt_ids: list[int]
    budget: int  # max new tokens for this row
    generator: torch.Generator | None
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish: Literal["stop", "length"] | None = None
    text: str | None = None  # set when a stop string cut it


class HFPolicy(Policy):
    """A transformers causal LM as a :class:`Policy`.

    Args:
        model: a model alias, local directory or Hub id (resolved with
            :func:`marti_trainer.models.resolve_model`), or an already loaded
            ``PreTrainedModel``, which is used as is (not copied, cast or moved:
            ``load_weights`` and ``add_adapter`` then modify it).
        dtype: ``"bfloat16"`` or ``"float32"`` weights; None means bfloat16 for a path and the
            model's own dtype for a loaded model (an explicit dtype must then match it).
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
        from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel

        from marti_trainer.attention import resolve_attention

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
            from marti_trainer.models import resolve_model

            source = resolve_model(model)
            self._model = AutoModelForCausalLM.from_pretrained(
                source,
                dtype=_DTYPES[dtype or "bfloat16"],
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
        rows = self._make_rows(prompt_ids, params)
        # Prompts that start alike side by side: a batch prefills their shared prefix once.
        order = sorted(range(len(rows)), key=lambda r: rows[r].prompt_ids)
        was_training = self._model.training  # a shared trainer model may be in train mode
        self._model.eval()
        try:
            with self._adapter_context(adapter), torch.inference_mode():
                for start in range(0, len(order), self._batch_size):
                    self._decode_chunk(
                        [rows[r] for r in order[start : start + self._batch_size]], params
                    )
        finally:
            self._model.train(was_training)

        result: list[list[Generation]] = [[] for _ in prompts]
        for row in rows:  # rows are in (request, sample) order
            text = row.text
            if text is None:
                text = self._tokenizer.decode(row.tokens, skip_special_tokens=True)
            result[row.request].append(
                Generation(
                    text=text,
                    token_ids=list(row.tokens),
                    logprobs=list(row.logprobs),
                    prompt_token_ids=list(row.prompt_ids),
                    finish_reason=row.finish or "length",
                )
            )
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
        from marti_trainer.policies.hf_continuous import hf_generate_each

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

    def continuous_driver(self, on_done: Any, max_rows: int) -> Any:
        """A rollout driver with iteration-level batching over this policy (requests join and
        leave the running decode batch at every token step): see
        :mod:`marti_trainer.policies.hf_continuous`. ``on_done(request, generation, error)``
        is called from the driver's worker thread; nothing else may use this policy while
        the driver is open."""
        from marti_trainer.policies.hf_continuous import ContinuousDriver

        return ContinuousDriver(self, on_done, max_rows)

    def _make_rows(self, prompt_ids: list[list[int]], params: SamplingParams) -> list[_Row]:
        rows = []
        for i, ids in enumerate(prompt_ids):
            budget = min(params.max_tokens, self._max_context - len(ids))
            for j in range(params.n):
                generator = None
                if not params.greedy:
                    if params.seed is not None:
                        row_seed = _sample_seed(params.seed, j, ids)
                    else:
                        row_seed = int(torch.randint(0, 2**62, (), generator=self._rng).item())
                    generator = torch.Generator().manual_seed(row_seed)
                rows.append(_Row(i, j, ids, budget, generator))
        return rows

    def _decode_chunk(self, rows: list[_Row], params: SamplingParams) -> None:
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

    def _decode(self, rows: list[_Row], params: SamplingParams) -> None:
        """Generate every row of one batch to completion (fills the rows in place)."""
        device = self._model.device
        batch = len(rows)
        cache, mask, positions, logits = _prefill(
            self._model, [r.prompt_ids for r in rows], self._pad_id
        )
        max_steps = max(r.budget for r in rows)
        for _ in range(max_steps):
            active = [r.finish is None for r in rows]
            tokens, logprobs = self._sample(logits, rows, active, params)
            for b, row in enumerate(rows):
                if not active[b]:
                    continue
                token = int(tokens[b])
                row.tokens.append(token)
                row.logprobs.append(float(logprobs[b]))
                if token in self._eos_ids or self._match_stop(row, params.stop):
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

    def _sample(
        self,
        logits: torch.Tensor,
        rows: list[_Row],
        active: list[bool],
        params: SamplingParams,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Pick one token per row; return (token ids [B], their log-probs [B]) on the CPU.

        Every active row consumes exactly one uniform from its own generator, so its stream
        does not depend on other rows.
        """
        logits = logits.float()  # stays on the model's device; only [B] values come back
        if params.greedy:
            logp = torch.log_softmax(logits, dim=-1)
            tokens = logp.argmax(dim=-1)
            return tokens.cpu(), logp.gather(1, tokens[:, None]).squeeze(1).cpu()
        # u in (0, 1]: the inverse CDF then never lands on a zero-probability token. The
        # generators are CPU generators, so streams are the same on every device.
        u = torch.tensor(
            [
                1.0 - float(torch.rand((), generator=r.generator)) if a else 0.5
                for r, a in zip(rows, active, strict=True)
            ]
        ).to(logits.device)
        logp = torch.log_softmax(logits / params.temperature, dim=-1)
        if params.top_p < 1.0:
            logp, order = _nucleus(logp, params.top_p)
        else:
            order = None
        cdf = logp.exp().cumsum(dim=-1)
        index = torch.searchsorted(cdf, (u * cdf[:, -1]).unsqueeze(1)).clamp(max=cdf.shape[1] - 1)
        chosen_logp = logp.gather(1, index).squeeze(1)
        tokens = order.gather(1, index).squeeze(1) if order is not None else index.squeeze(1)
        return tokens.cpu(), chosen_logp.cpu()

    def _match_stop(self, row: _Row, stop: tuple[str, ...]) -> bool:
        """If a stop string occurs in the row's completion, cut ``row.text`` before it."""
        if not stop:
            return False
        text = self._tokenizer.decode(row.tokens, skip_special_tokens=True)
        cut = min((k for k in (text.find(s) for s in stop) if k >= 0), default=-1)
        if cut < 0:
            return False
        row.text = text[:cut]
        return True

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

    def _adapter_context(self, adapter: str | None) -> Any:
        import contextlib

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


def _prefill(
    model: Any, prompts: Sequence[Sequence[int]], pad_id: int
) -> tuple[Any, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Prefill ``prompts`` left-padded, each distinct prompt once and each prefix that
    distinct prompts share once (:func:`~marti_trainer.prompt_tree.prompt_tree`).

    In a rollout the episodes of a group, and the agents of one round, often send the same
    prompt: its rows are copies of one computation. A debate's later rounds send prompts
    that repeat the task statement before the other agents' answers: that prefix is run
    once, and each prompt's rest runs on its cache (the mask spans both, left-padded, so
    the padding between them is never attended to). Returns ``(cache, mask [B, W],
    positions [B, 1], logits [B, V])``, one row per prompt in order: ``positions`` is each
    row's last position id, ``logits`` predict its first new token.
    """
    tree = prompt_tree([tuple(p) for p in prompts])
    device = model.device
    keys = [tuple(prompts[row]) for row in tree.distinct]
    cut = [tree.prefix_len[c] for c in tree.prompt_cluster]
    cache, below = None, None
    if tree.has_prefixes:
        clusters = [c for c, n in enumerate(tree.prefix_len) if n > 0]
        first = [tree.prompt_cluster.index(c) for c in clusters]
        ids, mask = _left_padded(
            [keys[u][: tree.prefix_len[c]] for u, c in zip(first, clusters, strict=True)],
            pad_id, device,
        )  # fmt: skip
        out = model(
            input_ids=ids, attention_mask=mask, position_ids=(mask.cumsum(-1) - 1).clamp(min=0),
            use_cache=True, logits_to_keep=1,
        )  # fmt: skip
        # Each prompt's row of the prefix cache; a prompt without a prefix reads a zero row
        # (index len(clusters)), fully masked.
        row_of = {c: i for i, c in enumerate(clusters)}
        index = torch.tensor(
            [row_of.get(c, len(clusters)) for c in tree.prompt_cluster], device=device
        )
        cache = output_cache(out)
        for layer in cache_layers(cache):
            layer.keys = _with_zero_row(layer.keys).index_select(0, index)
            layer.values = _with_zero_row(layer.values).index_select(0, index)
        below = _with_zero_row(mask).index_select(0, index)
    ids, mask = _left_padded([k[n:] for k, n in zip(keys, cut, strict=True)], pad_id, device)
    positions = torch.tensor(cut, device=device)[:, None] + (mask.cumsum(-1) - 1).clamp(min=0)
    if below is not None:
        mask = torch.cat([below, mask], dim=1)
    out = model(
        input_ids=ids,
        attention_mask=mask,
        position_ids=positions,
        use_cache=True,
        logits_to_keep=1,
        **(cache_kwargs(cache) if cache is not None else {}),
    )
    cache, logits, positions = output_cache(out), out.logits[:, -1, :], positions[:, -1:]
    if tree.row_prompt != list(range(len(prompts))):  # duplicates, or distinct prompts sorted
        rows = torch.tensor(tree.row_prompt, dtype=torch.long, device=device)
        for layer in cache_layers(cache):
            layer.keys = layer.keys.index_select(0, rows)
            layer.values = layer.values.index_select(0, rows)
        mask, positions, logits = (t.index_select(0, rows) for t in (mask, positions, logits))
    return cache, mask, positions, logits


def _left_padded(
    seqs: Sequence[Sequence[int]], pad_id: int, device: Any
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(ids, mask)`` ``[N, longest]`` of token sequences, left-padded, on ``device``."""
    width = max(len(x) for x in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for b, seq in enumerate(seqs):
        ids[b, width - len(seq) :] = torch.tensor(list(seq), dtype=torch.long)
        mask[b, width - len(seq) :] = 1
    return ids.to(device), mask.to(device)


def _with_zero_row(t: torch.Tensor) -> torch.Tensor:
    return torch.cat([t, t.new_zeros((1, *t.shape[1:]))])


def _nucleus(logp: torch.Tensor, top_p: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-p nucleus of each row of ``logp`` [B, V] (log-probs).

    Returns ``(nucleus_logp [B, k], token_ids [B, k])`` sorted by probability, descending:
    the smallest prefix whose mass reaches ``top_p`` (always >= 1 token), renormalised to
    sum to 1; entries past a row's nucleus are ``-inf``. Uses ``topk`` with a growing ``k``
    instead of a full vocabulary sort (a 49k-entry sort per row per step is slow on a CPU).
    """
    vocab = logp.shape[-1]
    k = min(64, vocab)
    while True:
        top, order = logp.topk(k, dim=-1)  # sorted, descending
        probs = top.exp()
        if k == vocab or bool((probs.sum(dim=-1) >= top_p).all()):
            break
        k = min(4 * k, vocab)
    mass_before = probs.cumsum(dim=-1) - probs
    top = top.masked_fill(mass_before >= top_p, float("-inf"))  # the first token always stays
    return top - top.logsumexp(dim=-1, keepdim=True), order


def _checkpoint_entries(folder: Path) -> Iterator[tuple[str, torch.Tensor]]:
    """Yield (name, tensor) for every weight in a checkpoint directory (loaded on the CPU)."""
    if not folder.is_dir():
        raise ValueError(f"load_weights: {folder} is not a directory")
    files = sorted(p for p in folder.glob("*.safetensors") if p.name != "adapter_model.safetensors")
    if files:
        from safetensors.torch import load_file

        for file in files:
            yield from load_file(str(file), device="cpu").items()
        return
    bins = sorted(folder.glob("pytorch_model*.bin"))
    if not bins:
        raise ValueError(f"load_weights: no *.safetensors or pytorch_model*.bin in {folder}")
    for file in bins:
        yield from torch.load(file, map_location="cpu", weights_only=True).items()
