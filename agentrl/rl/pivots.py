"""Pivot states: RL from one turn at a time of expert trajectories (PivotRL, Yi et al.
2026, arXiv 2603.21383).

Every assistant turn of an executed, verified expert trajectory is a candidate state: the
history before it, and the expert's action there. The pivots stage samples
``pivots.samples`` turns at each from the frozen sft model and keeps the candidates whose
outcomes vary and whose pass rate lies in the band ``pivots.min_pass_rate`` to
``max_pass_rate`` (``profile``: offline profiling). The rl stage then draws kept pivots,
samples ``rl.group_size`` turns at each through the same harness and engine (prefix cache,
token-exact records; ``Harness.one_turn``), scores each against the expert's action
(``turn_reward.judge_turn``) and trains on the sampled turn alone: the history is prompt,
never loss. A pivot whose group came out all equal, or whose group's pass rate left the
band, is retired for the rest of the run (``spent``: PivotRL re-profiles when variance
collapses; here every group is a fresh profile of its pivot, so the re-profiling is done
online, at no extra rollout); when every pivot is retired, all return.

Why a band, measured (three runs from one sft on the 1-3 hop rl split, 173 pivot groups
drawn, each pivot's group set against its profiled pass rate): groups of pivots profiled
at 1 in 8 came out all equal 15 times in 29, at 5 or 6 in 8 29 times in 86, at 2 to 4 in
8 10 times in 58 (2 or 3 in 8: 3 in 34). The policy moves from the one profiled (pivot
reward 0.6 in training against 0.45 in the profile), so the edges go flat. With the band
2 to 4 in 8 (40 pivots of 128 tasks) and online retirement, 7 of the first 40 groups came
out flat (17.5%); the pool was then spent, every pivot returned, and 10 of the next 16 were
flat (22% over the run). A pool needs more pivots than the run draws groups
(``rl.steps`` times the pivot groups of a step, plus resamples): the rl stage says when it
has fewer. Profiled on 256 tasks (853 candidates, 32.5 min), the same 22 steps drew 50
pivot groups and 43 had signal (11% flat), at 3.3 s of rollout per kept group against
25.7 s for a full-episode group.

Simplifications, stated: a candidate whose history does not fit ``harness.context_limit``
with room for a turn is left out; the expert trajectories are the oracle's (one call per
turn), so a state has one right action up to functional equivalence.

Measured caveat: on the oracle's trajectories the answer turns are easy for sft (on the
1-3 hop rl split, 124 of 128 answer states passed 8 of 8 samples, none was kept), so the
filter keeps call states only. Pivot rl then punishes answering early and never rewards
answering on time, and full episodes drift to calling until the turns run out; a KL to the
start (``rl.kl_coef``), a mix with full episodes (``rl.rollouts: mix``) and answer states
drawn whatever their pass rate (``rl.anchor_share``: the ``anchors`` source) are the guards
that could anchor that decision (the KL at 0.1 held the log-probs but still lost 4
heldout_compose points to sft: not enough). Anchors at 0.5 (33 steps, 11 of 125 anchor
groups trained on) kept full episodes whole: greedy test 0.970 -> 0.955, -0.015
[-0.054, +0.022] against sft, where pivots alone had fallen to 0.48 (from 0.985); yet
heldout_compose -0.030 [-0.065, -0.004]: no gain where full episodes gained.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from statistics import fmean
from typing import Any

from agentrl.chat import ChatFormat, render_ids
from agentrl.config import RLSection
from agentrl.dataset import expert_trajectory
from agentrl.envs.registry import Registry
from agentrl.harness.loop import Harness
from agentrl.harness.records import Episode
from agentrl.rl.rewards import outcome, outcome_rewards
from agentrl.rl.rollouts import Group, ShuffledDraw, StepData, kept_groups
from agentrl.rl.turn_reward import judge_turn
from agentrl.tools.sandboxes import SandboxSpec


@dataclass(frozen=True, eq=False)
class Pivot:
    """The state before assistant message ``index`` of a record's expert trajectory."""

    record: dict[str, Any]
    index: int

    @property
    def id(self) -> str:
        return f"{self.record['id']}@{self.index}"

    @property
    def history(self) -> list[dict[str, Any]]:
        return expert_trajectory(self.record)[: self.index]  # type: ignore[index]

    @property
    def action(self) -> dict[str, Any]:
        return expert_trajectory(self.record)[self.index]  # type: ignore[index]

    @property
    def kind(self) -> str:
        return "call" if self.action.get("tool_calls") else "answer"

    def state(self) -> dict[str, Any]:
        """What ``Harness.one_turn`` starts from."""
        return {"id": self.id, "messages": self.history, "tools": self.record["tools"]}


def candidates(records: list[dict[str, Any]]) -> Iterator[Pivot]:
    """Every assistant turn of every trajectory, except a deliberate mistake (a call whose
    observation is an error: the recovery trajectories' wrong first try)."""
    for record in records:
        messages = expert_trajectory(record)
        for index, message in enumerate(messages or []):
            if message["role"] != "assistant" or index == 0:
                continue
            follows = messages[index + 1] if index + 1 < len(messages) else None
            if message.get("tool_calls") and follows and follows["content"].startswith("Error:"):
                continue
            yield Pivot(record, index)


def fits(pivot: Pivot, tokenizer: Any, fmt: ChatFormat, context_limit: int, room: int) -> bool:
    """Whether the pivot's history leaves ``room`` tokens for a turn in the context."""
    prompt = render_ids(tokenizer, fmt, pivot.history, pivot.record["tools"], True)[0]
    return len(prompt) + room <= context_limit


class PivotJudge:
    """Scores one-turn episodes in place: verdict, success and grounded, as the harness
    does for whole episodes, so rewards come from ``rewards.outcome_rewards`` either way."""

    def __init__(self, registry: Registry, fmt: ChatFormat, sandbox: SandboxSpec):
        self.registry, self.fmt, self.sandbox = registry, fmt, sandbox

    def __call__(self, episodes: list[Episode], pivots: list[Pivot]) -> None:
        for episode, pivot in zip(episodes, pivots, strict=True):
            text = episode.messages[-1]["content"]
            verdict = judge_turn(
                text, pivot.record, pivot.history, pivot.action, self.registry, self.fmt,
                self.sandbox,
            )  # fmt: skip
            episode.success, episode.grounded = verdict.success, verdict.grounded
            episode.reward, episode.verdict = float(verdict.success), verdict.reason


def profile(
    harness: Harness,
    judge: PivotJudge,
    pivots: list[Pivot],
    samples: int,
    seed: int,
    grounded_only: bool,
    chunk: int = 16,
) -> Iterator[tuple[Pivot, float, list[str]]]:
    """(pivot, pass rate over ``samples`` sampled turns, their verdicts) for every pivot,
    ``chunk`` pivots per engine call; the pass rate counts what the rl reward would
    (grounded answers only under ``grounded_only``)."""
    for start in range(0, len(pivots), chunk):
        part = pivots[start : start + chunk]
        episodes = harness.one_turn([p.state() for p in part], samples, seed=seed + start)
        judge(episodes, [p for p in part for _ in range(samples)])
        for k, pivot in enumerate(part):
            drawn = episodes[k * samples : (k + 1) * samples]
            rate = sum(outcome(e.reward, e.grounded, grounded_only) for e in drawn) / samples
            yield pivot, rate, [e.verdict for e in drawn]


def informative(pass_rate: float, band: tuple[float, float]) -> bool:
    """Kept by profiling: outcomes that vary (0 < rate < 1), within ``band`` (the
    ``pivots.min_pass_rate`` and ``max_pass_rate`` edges, both kept).

    >>> [informative(r, (0.25, 0.5)) for r in (0.0, 0.125, 0.25, 0.5, 0.625, 1.0)]
    [False, False, True, True, False, False]
    >>> [informative(r, (0.0, 1.0)) for r in (0.0, 0.125, 0.875, 1.0)]
    [False, True, True, False]
    """
    low, high = band
    return 0.0 < pass_rate < 1.0 and low <= pass_rate <= high


def spent(rewards: list[float], passed: list[float], band: tuple[float, float]) -> bool:
    """Whether a pivot's group retires it: its rewards came out all equal (no signal), or
    its pass rate (``passed``: the outcomes) left ``band`` (the policy moved past it).

    >>> spent([1.0, 0.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0], (0.25, 0.5))
    False
    >>> spent([1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 1.0, 0.0], (0.25, 0.5))
    True
    >>> spent([0.0, 0.0], [0.0, 0.0], (0.0, 1.0))
    True
    """
    return len(set(rewards)) == 1 or not informative(fmean(passed), band)


class PivotRollouts:
    """``group_size`` one-turn rollouts at each of a step's pivots, drawn from ``pool`` in
    a seeded shuffle. A pivot is retired when its group came out all equal, or when the
    group's pass rate left ``band``: each group is a fresh profile of its pivot under the
    current policy (online re-profiling, at no extra rollout), and the policy drifts from
    the one profiled. Under ``retire=False`` (the ``anchors`` source: answer states kept
    in view whatever their pass rate) nothing retires."""

    def __init__(
        self,
        cfg: RLSection,
        harness: Harness,
        judge: PivotJudge,
        pool: list[Pivot],
        seed: int,
        rng: random.Random,
        rank: int = 0,
        world: int = 1,
        name: str = "pivots",
        retire: bool = True,
        band: tuple[float, float] = (0.0, 1.0),
    ):
        if not pool:
            raise ValueError(f"no {name} to draw from")
        self.cfg, self.harness, self.judge, self.pool = cfg, harness, judge, pool
        self.seed, self.rng, self.rank, self.world = seed, rng, rank, world
        self.name, self.retire, self.band = name, retire, band
        self.draws = ShuffledDraw(seed + 1, rank, world)
        self.retired: set[str] = set()

    def groups(
        self, records: list[dict[str, Any]], step: int, wanted: int, data: StepData
    ) -> list[Group]:
        size = self.cfg.group_size

        def draw(n: int, attempt: int) -> tuple[list[Episode], list[float]]:
            if len(self.retired) >= len(self.pool):
                self.retired.clear()
            pivots = self.draws.take(self.pool, n, skip=lambda p: p.id in self.retired)
            call = self.seed * 100_019 + step * 37 + attempt
            episodes = self.harness.one_turn(
                [p.state() for p in pivots], size, seed=call * self.world + self.rank
            )
            self.judge(episodes, [p for p in pivots for _ in range(size)])
            rewards = outcome_rewards(episodes, self.cfg, self.rng)
            for g, pivot in enumerate(pivots):
                group = slice(g * size, (g + 1) * size)
                passed = [
                    outcome(e.reward, e.grounded, self.cfg.grounded_only) for e in episodes[group]
                ]
                if self.retire and spent(rewards[group], passed, self.band):
                    self.retired.add(pivot.id)
            return episodes, rewards

        return kept_groups(self.cfg, draw, wanted, data, self.name)

    def state(self) -> dict[str, Any]:
        return {
            "position": self.draws.position,
            "rng": self.rng.getstate(),
            "retired": sorted(self.retired),
        }

    def restore(self, state: dict[str, Any]) -> None:
        self.draws.position = int(state["position"])
        self.rng.setstate(state["rng"])
        self.retired = set(state["retired"])
