"""Engines: what turns prompts (token ids) into sampled continuations with log-probs.

Every engine takes and returns token ids, so trajectories stay token-exact whichever
engine made them. ``HFEngine`` runs an in-process transformers model: batched generation
with a KV cache, left padding, the end-of-turn token as stop id, temperature and top-p,
seeded per call. ``OpenAIEngine`` (``openai_engine.py``) does the same over HTTP. Its log-probs are those of the sampled token under the model's own
distribution (temperature 1, before top-p), the quantity the trainer recomputes, so the
rollout/train gap measures engine mismatch only.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

import torch

from agentrl.chat.formats import IM_END
from agentrl.errors import StageError
from agentrl.model.generate import left_pad


class EngineError(StageError):
    """An engine could not generate or take new weights (server down, bad reply, ...)."""


@dataclass(frozen=True)
class Sampling:
    max_new_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int = 0


@dataclass
class Generation:
    ids: list[int]  # ends with the stop id unless the generation was cut off
    logprobs: list[float]
    stopped: bool  # ended on a stop id (False: hit max_new_tokens)


class Engine(Protocol):
    def generate(self, prompts: list[list[int]], sampling: Sampling) -> list[Generation]: ...

    def load_weights(self, model_dir: Path) -> None:
        """Serve the weights saved in ``model_dir`` from the next ``generate`` on."""
        ...


class HFEngine:
    """Batched sampling from a transformers causal LM held in this process.

    ``model`` is the module the trainer updates, so new weights are visible to the next
    ``generate`` without any copy (the in-process form of a weight sync).
    """

    def __init__(self, model: Any, tokenizer: Any, bucket: int = 32):
        self.model = model
        self.bucket = bucket
        self.pad_id = tokenizer.pad_token_id
        self.stop_id = tokenizer.convert_tokens_to_ids(IM_END)

    def load_weights(self, model_dir: Path) -> None:
        """Copy saved weights into the held module (a trainer sharing the module needs
        no call at all: its updates are already what ``generate`` uses)."""
        from transformers import AutoModelForCausalLM

        try:
            saved = AutoModelForCausalLM.from_pretrained(model_dir, dtype=self.model.dtype)
            self.model.load_state_dict(saved.state_dict())
        except (OSError, ValueError, RuntimeError) as err:
            raise EngineError(f"{model_dir}: cannot load weights: {str(err)[:200]}") from err

    def generate(self, prompts: list[list[int]], sampling: Sampling) -> list[Generation]:
        """Prompts of similar length are generated together, ``bucket`` at a time: left
        padding to the longest prompt of a bucket, not of the whole batch."""
        order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
        out: list[Generation | None] = [None] * len(prompts)
        for start in range(0, len(order), self.bucket):
            chunk = order[start : start + self.bucket]
            seeded = replace(sampling, seed=sampling.seed + start)
            for i, generation in zip(
                chunk, self._generate([prompts[i] for i in chunk], seeded), strict=True
            ):
                out[i] = generation
        return out  # type: ignore[return-value]

    @torch.no_grad()
    def _generate(self, prompts: list[list[int]], sampling: Sampling) -> list[Generation]:
        was_training = self.model.training
        self.model.eval()
        ids, attention = left_pad(prompts, self.pad_id)
        greedy = sampling.temperature == 0
        torch.manual_seed(sampling.seed)
        out = self.model.generate(
            input_ids=ids,
            attention_mask=attention,
            max_new_tokens=sampling.max_new_tokens,
            do_sample=not greedy,
            temperature=None if greedy else sampling.temperature,
            top_p=None if greedy else sampling.top_p,
            top_k=None,
            eos_token_id=self.stop_id,
            pad_token_id=self.pad_id,
            return_dict_in_generate=True,
            output_logits=True,
            cache_implementation="static",  # no per-token torch.cat of a growing cache
        )
        self.model.train(was_training)
        new = out.sequences[:, ids.shape[1] :]
        logits = torch.stack(out.logits, dim=1).float()  # (batch, steps, vocab), raw
        logprobs = torch.log_softmax(logits, dim=-1).gather(-1, new[..., None])[..., 0]
        results = []
        for row, row_logprobs in zip(new.tolist(), logprobs.tolist(), strict=True):
            end = row.index(self.stop_id) + 1 if self.stop_id in row else len(row)
            results.append(
                Generation(row[:end], row_logprobs[:end], stopped=self.stop_id in row[:end])
            )
        return results
