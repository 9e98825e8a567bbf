"""The agent loop: generate every live episode's next turn together, parse, execute the
calls concurrently, append the responses, manage the context; until an answer, the turn
limit or the context limit. Nothing a model writes crashes the batch: parse errors,
unknown tools, bad arguments, tool exceptions and timeouts are observations it reads.

Peak context never exceeds ``harness.context_limit``: a turn is generated only when the
prompt plus ``max_new_tokens`` fits, and tool responses are appended only when the next
turn still fits after them (else the context strategy compacts, or the episode ends):
``window.py``.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from agentrl.chat import ChatFormat, parse, render_ids
from agentrl.chat.formats import IM_END
from agentrl.config import HarnessSection
from agentrl.envs.registry import Registry
from agentrl.envs.verify import verify
from agentrl.harness.engine import Engine, Sampling
from agentrl.harness.executor import InProcessExecutor
from agentrl.harness.records import Episode, Segment, TurnStats
from agentrl.harness.window import ContextWindow, LiveEpisode
from agentrl.tools.executor import Observation
from agentrl.tools.sandboxes import SandboxSpec


def _state_hash(live: LiveEpisode) -> str:
    """The environment state a turn starts from, as anchor states compare it: everything
    the tools returned so far and what stateful tools hold (not the model's wording)."""
    seen = {"observations": live.episode.observations, "held": live.box.snapshot()}
    return hashlib.sha256(json.dumps(seen, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _seed(seed: int, turn: int) -> int:
    return int(hashlib.sha256(f"{seed}:{turn}".encode()).hexdigest()[:8], 16)


class Harness:
    def __init__(
        self,
        engine: Engine,
        tokenizer: Any,
        fmt: ChatFormat,
        registry: Registry,
        cfg: HarnessSection,
    ):
        self.engine = engine
        self.tokenizer = tokenizer
        self.fmt = fmt
        self.registry = registry
        self.cfg = cfg
        self.stop_id = tokenizer.convert_tokens_to_ids(IM_END)
        self.executor = InProcessExecutor(cfg.tool_workers, cfg.tool_timeout_s)
        self.sandbox = SandboxSpec(cfg.sandbox, cfg.sandbox_image)
        self.window = ContextWindow(tokenizer, fmt, cfg)
        # where run() spent its time: generate (the engine), tools, verify; the rest is ours
        self.seconds: Counter[str] = Counter()
        # told of every turn as it happens (a terminal session prints them): ("turn", episode)
        # after a turn is generated, ("tools", episode) once its calls' responses are in
        self.on_event: Callable[[str, Episode], None] | None = None

    def _tell(self, event: str, episode: Episode) -> None:
        if self.on_event is not None:
            self.on_event(event, episode)

    # --- episode life ------------------------------------------------------------------
    def _start(self, record: dict[str, Any], sample: int) -> LiveEpisode:
        tools, box = self.registry.bind(record["env"], self.sandbox)
        messages = [dict(record["messages"][0])]
        episode = Episode(record["id"], sample, messages, record["tools"])
        live = LiveEpisode(episode, record, tools, box, list(messages))
        if not self.window.new_segment(live):
            self._finish(live, "context_limit")
        return live

    def _finish(self, live: LiveEpisode, reason: str, final_text: str | None = None) -> None:
        ep = live.episode
        began = time.perf_counter()
        verdict = verify(live.record["verifier"], final_text, ep.observations, live.box.snapshot())
        self.seconds["verify"] += time.perf_counter() - began
        live.box.close()
        ep.done, ep.end_reason = True, reason
        ep.reward, ep.success, ep.grounded, ep.verdict = (
            verdict.reward,
            verdict.success,
            verdict.grounded,
            verdict.reason,
        )

    def run(self, records: list[dict[str, Any]], samples: int = 1, seed: int = 0) -> list[Episode]:
        """Run ``samples`` episodes of every record as one batch; episodes in input order."""
        lives = [self._start(r, s) for r in records for s in range(samples)]
        for turn in range(self.cfg.max_turns):
            active = [live for live in lives if not live.episode.done]
            if not active:
                break
            sampling = Sampling(
                self.cfg.max_new_tokens, self.cfg.temperature, self.cfg.top_p, _seed(seed, turn)
            )
            for live in active:
                live.turn_start = len(live.segment.ids)
                live.state = _state_hash(live)
            began, clock = time.perf_counter(), time.time_ns()
            generations = self.engine.generate([live.segment.ids for live in active], sampling)
            self.seconds["generate"] += time.perf_counter() - began
            generated = (clock, time.time_ns())  # one batch: every row's turn shares it
            work, pending = [], []
            for live, gen in zip(active, generations, strict=True):
                live.segment.add(gen.ids, policy=True, logprobs=gen.logprobs)
                body = gen.ids[:-1] if gen.stopped else gen.ids
                if not gen.stopped:
                    live.segment.add([self.stop_id], policy=False)
                text = self.tokenizer.decode(body, skip_special_tokens=False)
                assistant = {"role": "assistant", "content": text}
                live.episode.messages.append(assistant)
                live.view.append(assistant)
                self.window.check_retokenization(live)
                if live.summarizing:
                    live.episode.turns.append(
                        TurnStats(
                            len(gen.ids), 0, {}, 0, not gen.stopped, live.turn_start, live.state,
                            generated,
                        )
                    )  # fmt: skip
                    self._tell("turn", live.episode)
                    if not self.window.restart_from_summary(live, text):
                        self._finish(live, "context_limit")
                    continue
                parsed = parse(text, self.fmt, live.record["tools"])
                calls = [(c.name, c.arguments) for c in parsed.calls]
                stats = TurnStats(
                    len(gen.ids),
                    len(calls) + len(parsed.errors),
                    {},
                    0,
                    not gen.stopped,
                    live.turn_start,
                    live.state,
                    generated,
                )
                live.episode.turns.append(stats)
                self._tell("turn", live.episode)
                if not calls and not parsed.errors:
                    turns_left = self.cfg.max_turns - len(live.episode.turns)
                    if (
                        self.cfg.self_check
                        and not live.checked
                        and turns_left
                        and self.window.ask_check(live)
                    ):
                        continue
                    self._finish(live, "answer", text)
                    continue
                work.append((live.tools, calls))
                pending.append((live, parsed.errors, stats))
            began = time.perf_counter()
            results = self.executor.run(work)
            self.seconds["tools"] += time.perf_counter() - began
            for (live, errors, stats), observations in zip(pending, results, strict=True):
                now = time.time_ns()  # a parse error is the harness's reply: no call ran
                observations = [
                    Observation(f"Error: {e}", False, "parse_error", (now, now)) for e in errors
                ] + observations
                for obs in observations:
                    if obs.error:
                        stats.call_errors[obs.error] = stats.call_errors.get(obs.error, 0) + 1
                stats.tool_clocks = [obs.clock or (now, now) for obs in observations]
                tool_messages = [{"role": "tool", "content": o.text} for o in observations]
                live.episode.messages += tool_messages
                self._tell("tools", live.episode)
                if not self.window.append_responses(live, tool_messages):
                    self._finish(live, "context_limit")
                stats.context_tokens = len(live.segment.ids)
        for live in lives:
            if not live.episode.done:
                self._finish(live, "max_turns")
        return [live.episode for live in lives]

    def one_turn(
        self, states: list[dict[str, Any]], samples: int = 1, seed: int = 0
    ) -> list[Episode]:
        """``samples`` next turns of every state, generated together: a state is a record
        whose ``messages`` are a history ending before an assistant turn (``id``,
        ``messages``, ``tools``). Each sample is an episode of one segment: the rendered
        history (never trained on) and the one sampled turn. Nothing is executed or scored:
        what the turn is worth is the caller's to judge. States in input order."""
        prompts = [
            render_ids(self.tokenizer, self.fmt, s["messages"], s["tools"], True)[0] for s in states
        ]
        for state, prompt in zip(states, prompts, strict=True):
            if len(prompt) + self.cfg.max_new_tokens > self.cfg.context_limit:
                raise ValueError(f"state {state['id']}: {len(prompt)} prompt tokens leave no room")
        rows = [(s, p, k) for s, p in zip(states, prompts, strict=True) for k in range(samples)]
        sampling = Sampling(
            self.cfg.max_new_tokens, self.cfg.temperature, self.cfg.top_p, _seed(seed, 0)
        )
        began = time.perf_counter()
        generations = self.engine.generate([p for _, p, _ in rows], sampling)
        self.seconds["generate"] += time.perf_counter() - began
        episodes = []
        for (state, prompt, k), gen in zip(rows, generations, strict=True):
            segment = Segment(prompt_len=len(prompt))
            segment.add(prompt, policy=False)
            segment.add(gen.ids, policy=True, logprobs=gen.logprobs)
            if not gen.stopped:
                segment.add([self.stop_id], policy=False)
            body = gen.ids[:-1] if gen.stopped else gen.ids
            text = self.tokenizer.decode(body, skip_special_tokens=False)
            parsed = parse(text, self.fmt, state["tools"])
            messages = [*state["messages"], {"role": "assistant", "content": text}]
            episode = Episode(state["id"], k, messages, state["tools"], [segment])
            calls = len(parsed.calls) + len(parsed.errors)
            episode.turns.append(
                TurnStats(len(gen.ids), calls, {}, len(segment.ids), not gen.stopped,
                          len(prompt), state["id"])
            )  # fmt: skip
            episode.done, episode.end_reason = True, "turn"
            episodes.append(episode)
        return episodes

    def close(self) -> None:
        self.executor.close()
