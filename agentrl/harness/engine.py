"""Engines: what turns prompts (token ids) into sampled continuations with log-probs.

Every engine takes and returns token ids, so trajectories stay token-exact whichever
engine made them. ``HFEngine`` runs an in-process transformers model: batched generation
with a KV cache, left padding, the end-of-turn token as stop id (and optional stop
strings), temperature and top-p, each prompt sampled from its own stream of the call's
seed. ``OpenAIEngine`` (``openai_engine.py``) does the same over HTTP. Their log-probs are
those of the sampled token under the distribution sampled from: softmax(logits / T), before
top-p (greedy: T = 1), the quantity the trainer recomputes at the same temperature, so the
rollout/train gap measures engine mismatch only.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass
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
from agentrl.errors import ServerUnreachable, StageError
from agentrl.harness.prefix_cache import Entry, PrefixCache, assemble, extract
from agentrl.model.generate import left_pad


class EngineError(StageError):
    """An engine could not generate or take new weights (bad reply, failed reload, ...)."""


class EngineUnreachable(EngineError, ServerUnreachable):
    """The openai engine's server does not answer (exit 3)."""


@dataclass(frozen=True)
class Sampling:
    max_new_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int = 0
    stop: tuple[str, ...] = ()  # stop strings, besides the end-of-turn id (kept in the ids)


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


def sample_rows(scores: torch.Tensor, streams: list[torch.Generator]) -> torch.Tensor:
    """One token per row drawn from softmax(scores), by inverting the row's CDF at one
    uniform from the row's own stream. Exact up to float32 rounding (each token's share is
    within ~1e-7 of its probability); a 32 x 49k batch costs ~7 ms here, where Gumbel noise
    over the whole vocabulary cost ~50 ms, a quarter of a decode step. One stream per
    prompt: what a prompt samples does not depend on which prompts share its bucket."""
    cdf = torch.softmax(scores.float(), -1).cumsum_(-1)
    uniform = torch.cat([torch.rand(1, generator=stream) for stream in streams])
    chosen = torch.searchsorted(cdf, (uniform * cdf[:, -1])[:, None], right=True)[:, 0]
    # u * total can round up to total: the last token with any probability, then
    return torch.minimum(chosen, torch.searchsorted(cdf, cdf[:, -1:].contiguous())[:, 0])


def prompt_streams(seed: int, count: int) -> list[torch.Generator]:
    """The sampling stream of each of ``count`` prompts of a call seeded ``seed``: prompt
    ``i`` gets ``seed * 2**20 + i``, as the openai engine sends vLLM ``seed + i`` per
    prompt (2**20 prompts per call before two calls' streams could meet)."""
    return [torch.Generator().manual_seed((seed << 20) + i) for i in range(count)]


def _warpers(sampling: Sampling) -> LogitsProcessorList | None:
    """Temperature and top-p, or None for greedy decoding."""
    if sampling.temperature == 0:
        return None
    steps: list[LogitsProcessor] = [TemperatureLogitsWarper(sampling.temperature)]
    if sampling.top_p < 1:
        steps.append(TopPLogitsWarper(sampling.top_p))
    return LogitsProcessorList(steps)


MIN_SHARED = 32  # shorter common prefixes save less than an entry's copies cost


def shared_prefixes(prompts: list[list[int]], min_shared: int = MIN_SHARED) -> list[list[int]]:
    """Prefixes worth prefilling once: each prompt's longest prefix shared with another
    prompt (all of it but the last token for a repeated prompt), at least ``min_shared``
    tokens long. In sorted order a prompt's longest common prefix with any other is the
    one with a neighbour.

    >>> shared_prefixes([[1, 2, 3, 4], [1, 2, 3, 5], [1, 2, 3, 4], [9]], min_shared=2)
    [[1, 2, 3]]
    >>> shared_prefixes([[7, 8], [7, 8]], min_shared=1)
    [[7]]
    """
    unique = sorted({tuple(p) for p in prompts})
    repeated = {p for p, n in Counter(tuple(p) for p in prompts).items() if n > 1}
    out = set()
    for i, prompt in enumerate(unique):
        neighbours = unique[max(0, i - 1) : i] + unique[i + 1 : i + 2]
        share = max((_common(prompt, other) for other in neighbours), default=0)
        share = len(prompt) - 1 if prompt in repeated else min(share, len(prompt) - 1)
        if share >= min_shared:
            out.add(prompt[:share])
    return [list(prefix) for prefix in sorted(out)]


def _common(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


class HFEngine:
    """Batched sampling from a transformers causal LM held in this process.

    ``model`` is the module the trainer updates, so new weights are visible to the next
    ``generate`` without any copy (the in-process form of a weight sync). With
    ``prefix_cache`` an episode's next turn prefills only what was appended since its
    last turn (``prefix_cache.py``). ``seconds`` adds up where generation time went
    (``prefill``, ``decode``), for benches and the eval's cost breakdown.
    """

    def __init__(self, model: Any, tokenizer: Any, bucket: int = 32, prefix_cache: bool = True):
        self.model = model
        self.bucket = bucket
        self.pad_id = tokenizer.pad_token_id
        self.stop_id = tokenizer.convert_tokens_to_ids(IM_END)
        self.tokenizer = tokenizer
        self.cache = PrefixCache(model) if prefix_cache else None
        self.seconds: Counter[str] = Counter()

    def load_weights(self, model_dir: Path) -> None:
        """Copy saved weights into the held module (a trainer sharing the module needs
        no call at all: its updates are already what ``generate`` uses)."""
        from transformers import AutoModelForCausalLM

        try:
            saved = AutoModelForCausalLM.from_pretrained(model_dir, dtype=self.model.dtype)
            self.model.load_state_dict(saved.state_dict())
        except (OSError, ValueError, RuntimeError) as err:
            raise EngineError(f"{model_dir}: cannot load weights: {str(err)[:200]}") from err
        if self.cache is not None:
            self.cache.clear()  # keys and values of the old weights

    def generate(self, prompts: list[list[int]], sampling: Sampling) -> list[Generation]:
        """Prompts of similar length are generated together, ``bucket`` at a time: left
        padding to the longest prompt of a bucket, not of the whole batch."""
        if self.cache is not None:
            began = time.perf_counter()
            self._share_prefills(prompts)
            self.seconds["prefill"] += time.perf_counter() - began
        order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
        streams = prompt_streams(sampling.seed, len(prompts))
        out: list[Generation | None] = [None] * len(prompts)
        kept: list[Entry] = []
        for start in range(0, len(order), self.bucket):
            chunk = order[start : start + self.bucket]
            generations, entries = self._generate(
                [prompts[i] for i in chunk], sampling, [streams[i] for i in chunk]
            )
            kept += entries
            for i, generation in zip(chunk, generations, strict=True):
                out[i] = generation
        if self.cache is not None:
            self.cache.replace(kept)
        return out  # type: ignore[return-value]

    @torch.no_grad()
    def _share_prefills(self, prompts: list[list[int]]) -> None:
        """Tokens several prompts start with are prefilled once: their keys and values
        become prefix-cache entries the prompts then hit. A prompt sent more than once (the
        G samples of a group) shares all but its last token, so a group's first turn costs
        one prompt's prefill instead of G; distinct tasks over the same tools share their
        system prompt (most of a first turn's tokens on an eval split)."""
        assert self.cache is not None
        shared = shared_prefixes([p for p in prompts if self.cache.longest_prefix(p) is None])
        if not shared:
            return
        was_training = self.model.training
        self.model.eval()
        entries = []
        for start in range(0, len(shared), self.bucket):
            chunk = shared[start : start + self.bucket]
            ids, attention = left_pad(chunk, self.pad_id)
            width = ids.shape[1]
            cache = StaticCache(self.model.config, max_cache_len=width)
            positions = (attention.cumsum(-1) - 1).clamp(min=0)
            self._forward(ids, attention, positions, cache)
            for row, prefix in enumerate(chunk):
                kv = extract(cache, row, torch.arange(width - len(prefix), width))
                entries.append(Entry(prefix, kv))
        self.model.train(was_training)
        self.cache.add(entries)

    @torch.no_grad()
    def _generate(
        self, prompts: list[list[int]], sampling: Sampling, streams: list[torch.Generator]
    ) -> tuple[list[Generation], list[Entry]]:
        """One bucket: prefill what the prefix cache lacks, then decode token by token.
        Rows leave the batch once finished, so the rest stop paying for them (a third
        to a half of HF generate's row-steps went to finished rows on rollouts)."""
        prefill_began = time.perf_counter()
        was_training = self.model.training
        self.model.eval()
        hits = [self.cache.lookup(p) if self.cache else None for p in prompts]
        cached = [len(hit.ids) if hit else 0 for hit in hits]
        new_ids, new_attention = left_pad(
            [p[c:] for p, c in zip(prompts, cached, strict=True)], self.pad_id
        )
        width = max(cached)
        old_attention = torch.zeros((len(prompts), width), dtype=torch.long)
        for row, c in enumerate(cached):
            old_attention[row, width - c :] = 1
        attention = torch.cat([old_attention, new_attention], dim=1)
        total = attention.shape[1]
        # A static cache (no per-token torch.cat of a growing one), holding the hits first.
        cache = StaticCache(self.model.config, max_cache_len=total + sampling.max_new_tokens)
        if width:
            for layer, (keys, values) in enumerate(assemble(hits, width)):
                cache.update(keys, values, layer)
        positions = (attention.cumsum(-1) - 1).clamp(min=0)
        logits = self._forward(new_ids, attention, positions[:, width:], cache)
        decode_began = time.perf_counter()
        self.seconds["prefill"] += decode_began - prefill_began
        warpers = _warpers(sampling)
        t = sampling.temperature

        def scaled(logits: torch.Tensor) -> torch.Tensor:
            return logits / t if t not in (0.0, 1.0) else logits

        rows = list(range(len(prompts)))  # batch position -> prompt index
        generated: list[list[int]] = [[] for _ in prompts]
        logprobs: list[list[float]] = [[] for _ in prompts]
        entries: dict[int, Entry] = {}

        def keep_prefix(position: int, row: int) -> None:
            if self.cache is not None:  # every token but the last sampled one went through
                columns = torch.cat(
                    [
                        torch.arange(width - cached[row], width),
                        torch.arange(total - (len(prompts[row]) - cached[row]), total),
                        torch.arange(total, total + len(generated[row]) - 1),
                    ]
                )
                kv = extract(cache, position, columns)
                entries[row] = Entry(prompts[row] + generated[row][:-1], kv)

        next_position = positions[:, -1] + 1
        finished: set[int] = set()
        for step in range(sampling.max_new_tokens):
            if warpers is None:
                chosen = logits.argmax(-1)
            else:
                scores = warpers(None, logits.clone())
                chosen = sample_rows(scores, [streams[row] for row in rows])
            chosen_logprobs = torch.log_softmax(scaled(logits), -1).gather(-1, chosen[:, None])
            chosen_logprobs = chosen_logprobs[:, 0]
            for position, (row, token, logprob) in enumerate(
                zip(rows, chosen.tolist(), chosen_logprobs.tolist(), strict=True)
            ):
                if row in finished:
                    continue
                generated[row].append(token)
                logprobs[row].append(logprob)
                if (
                    token == self.stop_id
                    or step + 1 == sampling.max_new_tokens
                    or self._hit_stop_string(generated[row], sampling.stop)
                ):
                    finished.add(row)
                    keep_prefix(position, row)
            live = [position for position, row in enumerate(rows) if row not in finished]
            if not live:
                break
            # dropping rows copies the cache: worth it once a quarter of the batch is done
            if len(live) <= 0.75 * len(rows):
                index = torch.tensor(live)
                for layer in cache.layers:
                    layer.keys, layer.values = layer.keys[index], layer.values[index]
                    layer.batch_size = len(live)
                rows = [rows[i] for i in live]
                chosen, attention = chosen[index], attention[index]
                next_position = next_position[index]
            attention = torch.cat([attention, torch.ones((len(rows), 1), dtype=torch.long)], 1)
            logits = self._forward(chosen[:, None], attention, next_position[:, None], cache)
            next_position = next_position + 1
        self.model.train(was_training)
        self.seconds["decode"] += time.perf_counter() - decode_began
        results = [
            Generation(ids, lps, stopped=ids[-1] == self.stop_id)
            for ids, lps in zip(generated, logprobs, strict=True)
        ]
        return results, [entries[row] for row in sorted(entries)]

    def _hit_stop_string(self, ids: list[int], stop: tuple[str, ...]) -> bool:
        """Does the text end with a stop string? Only the tail is decoded: a stop string
        completed by this token lies within its last ``len(stop) + 8`` tokens."""
        if not stop:
            return False
        tail = self.tokenizer.decode(ids[-max(map(len, stop)) - 8 :], skip_special_tokens=False)
        return any(string in tail for string in stop)

    def _forward(
        self, ids: torch.Tensor, attention: torch.Tensor, positions: torch.Tensor, cache: Any
    ) -> torch.Tensor:
        """Raw next-token logits (float32) of each row's last position."""
        out = self.model(
            input_ids=ids,
            attention_mask=attention,
            position_ids=positions,
            cache=cache,
            use_cache=True,
            logits_to_keep=1,
        )
        return out.logits[:, -1, :].float()
