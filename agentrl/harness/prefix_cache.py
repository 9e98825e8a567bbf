"""Prefix caching for the hf engine: the keys and values an episode's last turn computed are
kept, so its next turn prefills only the tokens the harness appended (tool responses, the
next generation prompt) instead of the whole history — what vLLM's automatic prefix
caching does, sized for batched multi-turn rollouts.

A prompt sent several times in one call (a group's G samples of a task) is prefilled
once and shared the same way. Only the previous call's rows are kept (an episode's next
prompt extends its last sequence; anything older is never hit again), and the cache
empties itself when the weights change: a parameter's in-place version counter moves on
every optimizer step and on ``load_state_dict``, so a trainer sharing the module needs no
explicit call (one that writes through ``param.data``, which bypasses the counter, calls
``clear``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

KV = list[tuple[torch.Tensor, torch.Tensor]]  # per layer: keys, values (heads, tokens, dim)


@dataclass
class Entry:
    ids: list[int]  # the tokens whose keys and values ``kv`` holds
    kv: KV


def weights_version(model: Any) -> int:
    return sum(p._version for p in model.parameters())


class PrefixCache:
    def __init__(self, model: Any):
        self.model = model
        self.entries: list[Entry] = []
        self.version = weights_version(model)
        self.reused_tokens = 0  # prefill tokens saved so far

    def clear(self) -> None:
        self.entries = []

    def _current(self) -> list[Entry]:
        if weights_version(self.model) != self.version:
            self.entries, self.version = [], weights_version(self.model)
        return self.entries

    def longest_prefix(self, prompt: list[int]) -> Entry | None:
        """The longest kept sequence that is a proper prefix of ``prompt``."""
        best = None
        for entry in self._current():
            n = len(entry.ids)
            if n < len(prompt) and (best is None or n > len(best.ids)) and prompt[:n] == entry.ids:
                best = entry
        return best

    def lookup(self, prompt: list[int]) -> Entry | None:
        """``longest_prefix``, counted in ``reused_tokens``: what a prefill will skip."""
        best = self.longest_prefix(prompt)
        self.reused_tokens += len(best.ids) if best else 0
        return best

    def add(self, entries: list[Entry]) -> None:
        self.entries = self._current() + entries

    def replace(self, entries: list[Entry]) -> None:
        self.entries, self.version = entries, weights_version(self.model)


def assemble(hits: list[Entry | None], width: int) -> KV:
    """One batch of cached keys and values, each row right-aligned in ``width`` columns."""
    template = next(hit for hit in hits if hit is not None).kv
    layers = []
    for layer, (keys, values) in enumerate(template):
        shape = (len(hits), keys.shape[0], width, keys.shape[2])
        batch_keys, batch_values = keys.new_zeros(shape), values.new_zeros(shape)
        for row, hit in enumerate(hits):
            if hit is not None:
                k, v = hit.kv[layer]
                batch_keys[row, :, width - k.shape[1] :] = k
                batch_values[row, :, width - v.shape[1] :] = v
        layers.append((batch_keys, batch_values))
    return layers


def extract(cache: Any, row: int, columns: torch.Tensor) -> KV:
    """Row ``row``'s keys and values at ``columns`` of a finished generation's cache."""
    return [
        (layer.keys[row][:, columns].clone(), layer.values[row][:, columns].clone())
        for layer in cache.layers
    ]
