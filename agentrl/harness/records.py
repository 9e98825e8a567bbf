"""Token-in-token-out trajectory records.

A segment is one contiguous token sequence the model saw: a prompt (never trained on)
followed by the turns that happened in it. ``loss_mask`` is 1 exactly on tokens the policy
sampled and 0 on everything the harness inserted (tool responses, turn markers, a closing
``<|im_end|>`` after a cut-off generation); ``logprobs`` holds the sampling log-probability
of each policy token (0.0 elsewhere). Generated text is never re-tokenized: the ids are the
engine's. A context rewrite (window compaction) starts a new segment.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class Segment:
    ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    prompt_len: int = 0

    def add(self, ids: list[int], policy: bool, logprobs: list[float] | None = None) -> None:
        self.ids += ids
        self.loss_mask += [int(policy)] * len(ids)
        self.logprobs += logprobs if logprobs is not None else [0.0] * len(ids)


@dataclass
class TurnStats:
    generated_tokens: int
    calls: int
    call_errors: dict[str, int]
    context_tokens: int
    cut_off: bool  # the generation hit max_new_tokens without ending its turn
    prompt_tokens: int = 0  # the context the turn was generated from
    state: str = ""  # hash of what the environment had shown and held before the turn (gigpo)
    # wall clock (epoch ns: start, end) of the turn's generation and of each of its tool calls,
    # for traces; left out of to_json, so saved trajectories stay the same bytes on a rerun
    generated: tuple[int, int] | None = None
    tool_clocks: list[tuple[int, int]] = field(default_factory=list)

    CLOCKS = ("generated", "tool_clocks")


@dataclass
class Episode:
    """One task attempt: conversation, token records, outcome and per-turn figures."""

    task_id: str
    sample: int
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    segments: list[Segment] = field(default_factory=list)
    turns: list[TurnStats] = field(default_factory=list)
    done: bool = False
    end_reason: str = ""  # answer | max_turns | context_limit | turn (one turn from a state)
    reward: float = 0.0
    success: bool = False
    grounded: bool = False
    verdict: str = ""
    compactions: int = 0
    retokenize_mismatches: int = 0

    @property
    def observations(self) -> list[str]:
        """Every tool response (and error) the model was shown, in order."""
        return [m["content"] for m in self.messages if m["role"] == "tool"]

    @property
    def peak_context(self) -> int:
        return max((len(s.ids) for s in self.segments), default=0)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        for turn in out["turns"]:
            for clock in TurnStats.CLOCKS:
                del turn[clock]
        out["peak_context"] = self.peak_context
        out["observations"] = self.observations
        return out
