"""``agentrl serve``: an OpenAI-compatible completions server over the in-process hf engine.

    agentrl serve --model models/sft --port 8000
    curl 127.0.0.1:8000/v1/completions -H 'content-type: application/json' \\
         -d '{"model": "sft", "prompt": "<|im_start|>user\\nhi<|im_end|>\\n", "max_tokens": 16}'

It serves a saved checkpoint to any client (the ``openai`` package, curl, our
``OpenAIEngine``) and is what the ``openai`` engine is tested against here. Endpoints:
``GET /health``, ``GET /v1/models``, ``POST /v1/completions`` (prompts as text or token
ids, one or a batch; ``n``, ``max_tokens``, ``temperature``, ``top_p``, ``seed``,
``logprobs``, ``stop``, ``stop_token_ids``; vLLM's ``return_token_ids`` and
``return_tokens_as_token_ids``) and ``POST /update_weights_from_disk`` (SGLang's name).

Simplifications, stated: a request's prompts are generated as one batch and requests run
one at a time (no continuous batching across requests: a client that wants throughput
sends a batch, as ``OpenAIEngine`` does); ``top_logprobs`` lists only the sampled token.
"""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path
from typing import Any

from fastapi import FastAPI, HTTPException
from pydantic import BaseModel, ConfigDict, Field

from agentrl.harness.engine import EngineError, HFEngine, Sampling


class CompletionRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")  # clients send fields we have no use for

    model: str | None = None
    prompt: str | list[str] | list[int] | list[list[int]]
    max_tokens: int = Field(16, ge=1)
    temperature: float = Field(1.0, ge=0)
    top_p: float = Field(1.0, gt=0, le=1)
    n: int = Field(1, ge=1)
    seed: int | None = None
    logprobs: int | None = Field(None, ge=0)
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    include_stop_str_in_output: bool = False
    echo: bool = False
    stream: bool = False
    skip_special_tokens: bool = True
    return_token_ids: bool = False
    return_tokens_as_token_ids: bool = False


class WeightsRequest(BaseModel):
    model_path: str


def _prompt_ids(prompt: Any, tokenizer: Any) -> list[list[int]]:
    if isinstance(prompt, str):
        prompt = [prompt]
    if prompt and all(isinstance(t, int) for t in prompt):
        prompt = [prompt]
    batch = [
        tokenizer(p, add_special_tokens=False)["input_ids"] if isinstance(p, str) else p
        for p in prompt
    ]
    if not batch or any(not ids for ids in batch):
        raise HTTPException(400, "prompt: empty prompt")
    vocab = len(tokenizer)
    for ids in batch:
        bad = [i for i in ids if not 0 <= i < vocab]
        if bad:
            raise HTTPException(
                400, f"prompt: token ids {bad[:5]} outside the vocabulary (0..{vocab - 1})"
            )
    return batch


def _check_request(
    req: CompletionRequest, name: str, stop_id: int, tokenizer: Any, context_limit: int
) -> list[list[int]]:
    """The request's prompts as token ids (``n`` copies each), or a 4xx naming the field."""
    if req.stream:
        raise HTTPException(400, "stream: streaming is not supported")
    if req.model not in (None, name):
        raise HTTPException(404, f"model: '{req.model}' is not served (serving '{name}')")
    if set(req.stop_token_ids or []) - {stop_id}:
        raise HTTPException(400, f"stop_token_ids: only the end-of-turn id {stop_id} is supported")
    prompts = [ids for ids in _prompt_ids(req.prompt, tokenizer) for _ in range(req.n)]
    longest = max(map(len, prompts))
    if longest + req.max_tokens > context_limit:
        raise HTTPException(
            400,
            f"prompt ({longest} tokens) + max_tokens ({req.max_tokens}) exceeds the "
            f"context limit {context_limit}",
        )
    return prompts


def _choice(
    req: CompletionRequest,
    index: int,
    gen: Any,
    prompt: list[int],
    stop: tuple[str, ...],
    stop_id: int,
    tokenizer: Any,
) -> dict[str, Any]:
    """One OpenAI completion choice for generation ``gen`` (text, finish reason, log-probs
    and token ids as the request asks)."""
    shown = [i for i in gen.ids if not (req.skip_special_tokens and i == stop_id)]
    text = tokenizer.decode(shown, skip_special_tokens=req.skip_special_tokens)
    hit = [text.index(s) for s in stop if s in text]
    if hit and not req.include_stop_str_in_output:
        text = text[: min(hit)]
    # a row ends early only on the end-of-turn id or a stop string
    finished = len(gen.ids) < req.max_tokens or gen.stopped
    choice: dict[str, Any] = {
        "index": index,
        "text": text,
        "finish_reason": "stop" if finished else "length",
        "logprobs": None,
    }
    if req.logprobs is not None:
        tokens = (
            [f"token_id:{i}" for i in gen.ids]
            if req.return_tokens_as_token_ids
            else [tokenizer.decode([i]) for i in gen.ids]
        )
        choice["logprobs"] = {
            "tokens": tokens,
            "token_logprobs": gen.logprobs,
            "top_logprobs": [{t: lp} for t, lp in zip(tokens, gen.logprobs, strict=True)],
            "text_offset": [],
        }
    if req.return_token_ids:
        choice["token_ids"] = gen.ids
        choice["prompt_token_ids"] = prompt
    return choice


def build_app(engine: HFEngine, tokenizer: Any, name: str, context_limit: int) -> FastAPI:
    """The server for ``engine``; ``context_limit`` bounds prompt plus ``max_tokens``."""
    app = FastAPI(title="agentrl serve", version="1")
    lock = threading.Lock()  # one generation or weight load at a time on the module

    @app.get("/health")
    def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/v1/models")
    def models() -> dict[str, Any]:
        card = {
            "id": name,
            "object": "model",
            "owned_by": "agentrl",
            "max_model_len": context_limit,
        }
        return {"object": "list", "data": [card]}

    @app.post("/v1/completions")
    def completions(req: CompletionRequest) -> dict[str, Any]:
        prompts = _check_request(req, name, engine.stop_id, tokenizer, context_limit)
        seed = req.seed if req.seed is not None else uuid.uuid4().int % 2**31
        stop = (req.stop,) if isinstance(req.stop, str) else tuple(req.stop or ())
        with lock:
            generations = engine.generate(
                prompts, Sampling(req.max_tokens, req.temperature, req.top_p, seed, stop)
            )
        choices = [
            _choice(req, index, gen, prompts[index], stop, engine.stop_id, tokenizer)
            for index, gen in enumerate(generations)
        ]
        completion = sum(len(g.ids) for g in generations)
        prompt_tokens = sum(map(len, prompts))
        return {
            "id": f"cmpl-{uuid.uuid4().hex}",
            "object": "text_completion",
            "created": int(time.time()),
            "model": name,
            "choices": choices,
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion,
                "total_tokens": prompt_tokens + completion,
            },
        }

    @app.post("/update_weights_from_disk")
    def update_weights(req: WeightsRequest) -> dict[str, Any]:
        with lock:
            try:
                engine.load_weights(Path(req.model_path))
            except EngineError as err:
                raise HTTPException(400, f"model_path: {err}") from err
        return {"success": True, "message": f"loaded {req.model_path}"}

    return app
