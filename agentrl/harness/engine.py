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
from transformers import (
    LogitsProcessor,
    LogitsProcessorList,
    StaticCache,
    TemperatureLogitsWarper,
    TopPLogitsWarper,
)

from agentrl.chat.formats import IM_END
from agentrl.errors import StageError
from agentrl.harness.prefix_cache import Entry, PrefixCache, assemble, extract
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


class GumbelNoise(LogitsProcessor):
    """Adds Gumbel noise, so that the argmax is an exact sample of softmax(scores): the
    same distribution as multinomial sampling at a tenth of its cost on CPU batches."""

    def __init__(self, seed: int):
        self.generator = torch.Generator().manual_seed(seed)

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        uniform = torch.rand(scores.shape, generator=self.generator).clamp_(min=1e-20)
        return scores - torch.log(-torch.log(uniform)).to(scores.device)


def _processors(sampling: Sampling) -> LogitsProcessorList:
    if sampling.temperature == 0:
        return LogitsProcessorList()
    steps: list[LogitsProcessor] = [TemperatureLogitsWarper(sampling.temperature)]
    if sampling.top_p < 1:
        steps.append(TopPLogitsWarper(sampling.top_p))
    return LogitsProcessorList([*steps, GumbelNoise(sampling.seed)])


class HFEngine:
    """Batched sampling from a transformers causal LM held in this process.

    ``model`` is the module the trainer updates, so new weights are visible to the next
    ``generate`` without any copy (the in-process form of a weight sync). With
    ``prefix_cache`` an episode's next turn prefills only what was appended since its
    last turn (``prefix_cache.py``).
    """

    def __init__(self, model: Any, tokenizer: Any, bucket: int = 32, prefix_cache: bool = True):
        self.model = model
        self.bucket = bucket
        self.pad_id = tokenizer.pad_token_id
        self.stop_id = tokenizer.convert_tokens_to_ids(IM_END)
        self.cache = PrefixCache(model) if prefix_cache else None

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
        kept: list[Entry] = []
        for start in range(0, len(order), self.bucket):
            chunk = order[start : start + self.bucket]
            seeded = replace(sampling, seed=sampling.seed + start)
            generations, entries = self._generate([prompts[i] for i in chunk], seeded)
            kept += entries
            for i, generation in zip(chunk, generations, strict=True):
                out[i] = generation
        if self.cache is not None:
            self.cache.replace(kept)
        return out  # type: ignore[return-value]

    @torch.no_grad()
    def _generate(
        self, prompts: list[list[int]], sampling: Sampling
    ) -> tuple[list[Generation], list[Entry]]:
        was_training = self.model.training
        self.model.eval()
        hits = [self.cache.lookup(p) if self.cache else None for p in prompts]
        cached = [len(hit.ids) if hit else 0 for hit in hits]
        new_ids, new_attention = left_pad(
            [p[c:] for p, c in zip(prompts, cached, strict=True)], self.pad_id
        )
        width = max(cached)
        if width:  # cached rows right-aligned in `width` columns, then the new tokens
            old_attention = torch.zeros((len(prompts), width), dtype=torch.long)
            for row, c in enumerate(cached):
                old_attention[row, width - c :] = 1
            ids = torch.cat([torch.full_like(old_attention, self.pad_id), new_ids], dim=1)
            attention = torch.cat([old_attention, new_attention], dim=1)
        else:
            ids, attention = new_ids, new_attention
        # A static cache (no per-token torch.cat of a growing one), holding the hits first.
        cache = StaticCache(self.model.config, max_cache_len=ids.shape[1] + sampling.max_new_tokens)
        if width:
            for layer, (keys, values) in enumerate(assemble(hits, width)):
                cache.update(keys, values, layer)
        out = self.model.generate(
            input_ids=ids,
            attention_mask=attention,
            max_new_tokens=sampling.max_new_tokens,
            do_sample=False,  # sampling is the Gumbel-max argmax of `_processors`
            logits_processor=_processors(sampling),
            eos_token_id=self.stop_id,
            pad_token_id=self.pad_id,
            return_dict_in_generate=True,
            output_logits=True,
            cache=cache,
        )
        self.model.train(was_training)
        total = ids.shape[1]
        new = out.sequences[:, total:]
        logits = torch.stack(out.logits, dim=1).float()  # (batch, steps, vocab), raw
        logprobs = torch.log_softmax(logits, dim=-1).gather(-1, new[..., None])[..., 0]
        results, entries = [], []
        for row, (generated, row_logprobs) in enumerate(
            zip(new.tolist(), logprobs.tolist(), strict=True)
        ):
            end = generated.index(self.stop_id) + 1 if self.stop_id in generated else len(generated)
            results.append(
                Generation(
                    generated[:end], row_logprobs[:end], stopped=self.stop_id in generated[:end]
                )
            )
            if self.cache is not None:  # every token but the last sampled one went through
                columns = torch.cat(
                    [
                        torch.arange(width - cached[row], width),
                        torch.arange(total - (len(prompts[row]) - cached[row]), total + end - 1),
                    ]
                )
                kv = extract(out.cache, row, columns)
                entries.append(Entry(prompts[row] + generated[: end - 1], kv))
        return results, entries
