"""An engine over HTTP: any OpenAI-compatible ``/v1/completions`` endpoint that takes token
ids in and gives token ids and log-probs out — ``vllm serve``, SGLang, or ``agentrl serve``.

Against ``agentrl serve`` one harness turn is one request: every live episode's prompt as
a list of token ids (``prompt: [[ids], [ids], ...]``), its rows sampled from one seeded
generator. vLLM applies a request's ``seed`` to each of its prompts alike, so there every
prompt goes as its own request, seeded ``seed + row``, all at once (the server batches
them): otherwise a GRPO group's G identical prompts would sample one completion G times and
every group would carry no signal. SGLang gets the same (untested here; right for any
server that batches concurrent requests). The reply must carry the
generated ids; they are read from ``choices[i].token_ids`` (vLLM's ``return_token_ids``,
and ``agentrl serve``) or else from ``"token_id:N"`` strings in ``logprobs.tokens``
(vLLM's ``return_tokens_as_token_ids``). Text is never re-tokenized. Log-probs are the
sampled token's under the raw model distribution (vLLM's default ``logprobs_mode``).

New weights between RL steps (``load_weights``), by ``reload``:

- ``agentrl`` / ``sglang``: ``POST /update_weights_from_disk {"model_path": DIR}`` — the
  server loads the saved checkpoint in place (SGLang's endpoint of the same name).
- ``vllm``: ``POST /collective_rpc {"method": "reload_weights", "kwargs": {"weights_path":
  DIR}}`` (every worker loads DIR's weights in place) and ``POST /reset_prefix_cache``
  (cached prefixes were computed with the old weights). vLLM exposes both only with
  ``VLLM_SERVER_DEV_MODE=1``; DIR's head must be untied (``agentrl/model/untie.py``).
  Launch it with ``infra/vllm_serve.sh MODEL_DIR PORT``.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Literal

import httpx
from tenacity import retry, retry_if_exception_type, stop_after_attempt, wait_exponential

from agentrl.harness.engine import EngineError, EngineUnreachable, Generation, Sampling

Reload = Literal["agentrl", "sglang", "vllm"]
_TOKEN_ID_PREFIX = "token_id:"


def _generated_ids(choice: dict[str, Any]) -> list[int]:
    if choice.get("token_ids") is not None:
        return [int(i) for i in choice["token_ids"]]
    tokens = (choice.get("logprobs") or {}).get("tokens") or []
    if tokens and all(str(t).startswith(_TOKEN_ID_PREFIX) for t in tokens):
        return [int(str(t)[len(_TOKEN_ID_PREFIX) :]) for t in tokens]
    raise EngineError(
        "the completions reply has no generated token ids: start the server with "
        "return_token_ids or --return-tokens-as-token-ids (text is never re-tokenized)"
    )


class OpenAIEngine:
    def __init__(
        self,
        base_url: str,
        model: str,
        stop_id: int,
        reload: Reload = "agentrl",
        timeout_s: float = 600.0,
        api_key: str | None = None,
    ):
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.stop_id = stop_id
        self.reload = reload
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.client = httpx.Client(timeout=timeout_s, headers=headers)
        # vLLM seeds every prompt of a request alike (module docstring)
        self.seed_per_prompt = reload != "agentrl"
        self.pool = ThreadPoolExecutor(32, "completions")

    @retry(
        retry=retry_if_exception_type(httpx.TransportError),
        stop=stop_after_attempt(4),
        wait=wait_exponential(min=0.5, max=8),
        reraise=True,
    )
    def _post(self, url: str, body: dict[str, Any]) -> dict[str, Any]:
        reply = self.client.post(url, json=body)
        if reply.status_code != 200:
            raise EngineError(f"POST {url}: HTTP {reply.status_code}: {reply.text[:300]}")
        return reply.json() if reply.content else {}

    def _call(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        url = f"{self.base_url}{path}"
        try:
            return self._post(url, body)
        except httpx.TransportError as err:
            raise EngineUnreachable(
                f"harness.engine_url {self.base_url}: POST {path}: cannot reach the server: {err}"
            ) from err

    def generate(self, prompts: list[list[int]], sampling: Sampling) -> list[Generation]:
        body = {
            "model": self.model,
            "max_tokens": sampling.max_new_tokens,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "logprobs": 0,  # the sampled token's log-prob only
            "stop_token_ids": [self.stop_id],
            "skip_special_tokens": False,
            "include_stop_str_in_output": True,
            "return_token_ids": True,
            "return_tokens_as_token_ids": True,
        }
        if sampling.stop:
            body["stop"] = list(sampling.stop)
        if self.seed_per_prompt and len(prompts) > 1:
            rows = range(len(prompts))
            replies = self.pool.map(
                lambda i: self._complete(body, [prompts[i]], sampling.seed + i), rows
            )
            choices = [choice for reply in replies for choice in reply]
        else:
            choices = self._complete(body, prompts, sampling.seed)
        out = []
        for choice in choices:
            ids = _generated_ids(choice)
            logprobs = [float(x) for x in (choice.get("logprobs") or {}).get("token_logprobs", [])]
            if len(logprobs) != len(ids):
                raise EngineError(f"reply has {len(ids)} token ids but {len(logprobs)} log-probs")
            # A server that drops the stop token from its ids counts as cut off: the harness
            # then inserts <|im_end|> itself, outside the loss mask.
            out.append(Generation(ids, logprobs, stopped=bool(ids) and ids[-1] == self.stop_id))
        return out

    def _complete(self, body: dict[str, Any], prompts: list[list[int]], seed: int) -> list[dict]:
        """The choices of one /v1/completions request for ``prompts``, in prompt order."""
        reply = self._call("/v1/completions", body | {"prompt": prompts, "seed": seed})
        choices = sorted(reply["choices"], key=lambda c: c["index"])
        if len(choices) != len(prompts):
            raise EngineError(f"asked for {len(prompts)} completions, got {len(choices)}")
        return choices

    def load_weights(self, model_dir: Path) -> None:
        path = str(Path(model_dir).resolve())
        try:
            if self.reload == "vllm":
                rpc = {"method": "reload_weights", "kwargs": {"weights_path": path}}
                self._call("/collective_rpc", rpc)
                self._call("/reset_prefix_cache", {})
            else:
                self._call("/update_weights_from_disk", {"model_path": path})
        except EngineUnreachable:
            raise
        except EngineError as err:
            # vLLM's engine core ends with a failed reload_weights while /health still answers
            after = ""
            if self.reload == "vllm":
                after = "; vLLM's engine does not survive this: restart the server"
            raise EngineError(
                f"harness.engine_reload {self.reload}: the server at {self.base_url} could not "
                f"load the weights in {path}: {err}{after}"
            ) from err

    def close(self) -> None:
        self.pool.shutdown()
        self.client.close()
