"""An episode's context window: the token ids of its segments, what the harness inserts
between turns (tool responses, summary and self-check requests), and compaction when the
next turn would not fit under ``harness.context_limit`` (``context.py`` holds the
strategies: ``window`` drops old responses, ``summary``/``adaptive`` restart from a
progress summary the model writes).

A turn is generated only when the prompt plus ``max_new_tokens`` fits, and tool responses
are appended only when the next turn still fits after them; every method that can run out
of room says so (False) and the harness ends the episode with ``context_limit``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agentrl.chat import ChatFormat, render_ids, render_text
from agentrl.config import HarnessSection
from agentrl.envs.base import ToolBox
from agentrl.harness.context import CHECK_REQUEST, SUMMARY_REQUEST, compact, restart
from agentrl.harness.records import Episode, Segment
from agentrl.tools.executor import ToolSet


@dataclass
class LiveEpisode:
    """An episode the harness is running: its record, bound tools and context window."""

    episode: Episode
    record: dict[str, Any]
    tools: ToolSet
    box: ToolBox
    view: list[dict[str, Any]]  # the messages as the current segment renders them
    segment: Segment = field(default_factory=Segment)
    summarizing: bool = False  # the next turn is the progress summary a restart asked for
    checked: bool = False  # the self-check request was made
    turn_start: int = 0  # segment length before the current turn
    growth: list[int] = field(default_factory=list)  # tokens each turn added (turn + responses)
    state: str = ""  # the environment state the current turn starts from


class ContextWindow:
    """The token-level context of live episodes, for one tokenizer, chat format and
    harness configuration."""

    def __init__(self, tokenizer: Any, fmt: ChatFormat, cfg: HarnessSection):
        self.tokenizer, self.fmt, self.cfg = tokenizer, fmt, cfg
        self.request_tokens = len(tokenizer(SUMMARY_REQUEST, add_special_tokens=False)["input_ids"])

    def prompt(self, live: LiveEpisode) -> list[int]:
        """The current view's ids, ending in the generation prompt."""
        return render_ids(
            self.tokenizer, self.fmt, live.view, live.record["tools"], add_generation_prompt=True
        )[0]

    def new_segment(self, live: LiveEpisode) -> bool:
        """Start a segment from the current view; False if it cannot hold one more turn."""
        prompt = self.prompt(live)
        if len(prompt) + self.cfg.max_new_tokens > self.cfg.context_limit:
            return False
        live.segment = Segment(prompt_len=len(prompt))
        live.segment.add(prompt, policy=False)
        live.episode.segments.append(live.segment)
        return True

    def inserted(self, live: LiveEpisode, tool_messages: list[dict[str, Any]]) -> list[int]:
        """Ids the harness adds after an assistant turn: tool responses and the next
        generation prompt, tokenized on their own (they start after ``<|im_end|>``)."""
        tools = live.record["tools"]
        before, _ = render_text(self.fmt, live.view, tools)
        after, _ = render_text(self.fmt, live.view + tool_messages, tools, True)
        suffix = after[len(before) - 1 :]  # the newline after <|im_end|> is not in the ids
        return self.tokenizer(suffix, add_special_tokens=False)["input_ids"]

    def check_retokenization(self, live: LiveEpisode) -> None:
        """Count (never train on) a re-render of the decoded history that differs from the
        recorded ids: the records keep the engine's ids either way."""
        rendered = render_ids(self.tokenizer, self.fmt, live.view, live.record["tools"])[0]
        if rendered[: len(live.segment.ids)] != live.segment.ids:
            live.episode.retokenize_mismatches += 1

    def wants_summary(self, live: LiveEpisode, after: int) -> bool:
        """Ask for a progress summary now? ``summary``: past a fixed share of the limit.
        ``adaptive``: only if the turns still allowed, at the largest growth per turn seen,
        would not fit, and only at the last turn after which the request, the summary and
        one more turn would no longer fit."""
        cfg = self.cfg
        if cfg.context == "summary":
            return after > cfg.summary_at * cfg.context_limit - cfg.max_new_tokens
        if cfg.context != "adaptive":
            return False
        growth = max(live.growth)
        room = cfg.context_limit - after
        turns_left = cfg.max_turns - len(live.episode.turns)
        if turns_left <= 1 or turns_left * growth <= room:
            return False  # the rest of the episode fits as it is
        summary_turn = self.request_tokens + 16 + cfg.max_new_tokens  # 16: turn markers
        return room < growth + summary_turn

    def append_responses(self, live: LiveEpisode, tool_messages: list[dict[str, Any]]) -> bool:
        """Append a turn's tool responses: as they are while the next turn fits after them,
        else with the summary request (``summary``/``adaptive``) or compacted into a new
        segment; False when nothing makes the next turn fit (the episode ends)."""
        room = self.cfg.context_limit - self.cfg.max_new_tokens
        inserted = self.inserted(live, tool_messages)
        after = len(live.segment.ids) + len(inserted)
        live.growth.append(after - live.turn_start)
        if self.wants_summary(live, after):
            request = [*tool_messages, {"role": "user", "content": SUMMARY_REQUEST}]
            asked = self.inserted(live, request)
            if len(live.segment.ids) + len(asked) <= room:
                live.view += request
                live.episode.messages.append(request[-1])
                live.segment.add(asked, policy=False)
                live.summarizing = True
                return True
        if after <= room:
            live.view += tool_messages
            live.segment.add(inserted, policy=False)
            return True
        compacted = compact(self.cfg.context, live.view + tool_messages, self.cfg.window_keep)
        if compacted == live.view + tool_messages:
            return False
        live.view = compacted
        return self.compacted_segment(live)

    def ask_check(self, live: LiveEpisode) -> bool:
        """Insert the self-check request if one more turn fits after it."""
        live.checked = True
        request = [{"role": "user", "content": CHECK_REQUEST}]
        asked = self.inserted(live, request)
        if len(live.segment.ids) + len(asked) + self.cfg.max_new_tokens > self.cfg.context_limit:
            return False
        live.view += request
        live.episode.messages.append(request[0])
        live.segment.add(asked, policy=False)
        return True

    def restart_from_summary(self, live: LiveEpisode, summary: str) -> bool:
        """Restart the context from the task and ``summary``; False if no turn fits."""
        live.summarizing = False
        live.view = restart(live.episode.messages[0], summary)
        return self.compacted_segment(live)

    def compacted_segment(self, live: LiveEpisode) -> bool:
        """A new segment from the compacted view, counted as a compaction; False if it
        cannot hold one more turn."""
        if not self.new_segment(live):
            return False
        live.episode.compactions += 1
        return True
