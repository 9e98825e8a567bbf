"""Where a step's training data comes from, kept apart from the update: rollout sources
turn what they draw into scored groups, a step's rollouts (``StepRollouts``) take each
source's share of ``tasks_per_step`` groups and compute advantages once over every group
the step keeps (``StepData``), and a schedule runs them either in turn with the update or
one step ahead of it.

``EpisodeRollouts`` is the full-episode source: tasks of a seeded shuffle, ``group_size``
episodes each through the harness, outcome rewards, dynamic sampling. The one-turn source
from intermediate states of expert trajectories is ``pivots.PivotRollouts``; ``sources.py``
picks them by ``rl.rollouts``. Under several ranks each takes every world-th item of the
same shuffle (its share of ``tasks_per_step``) and samples from its own streams; ``batch``
scaling then runs over the rank's share. A new source implements ``groups``, ``state`` and
``restore`` and leaves the trainer as it is.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from statistics import fmean, pstdev
from typing import Any, Protocol, TypeVar

import numpy as np

from agentrl.config import RLSection
from agentrl.harness.loop import Harness
from agentrl.harness.records import Episode
from agentrl.rl.advantages import Rollout, advantages
from agentrl.rl.rewards import outcome_rewards

Group = tuple[list[Episode], list[float]]  # a group's rollouts and the rewards they earned
Item = TypeVar("Item")


@dataclass
class SourceTally:
    """One source's part of a step."""

    drawn: int = 0  # groups rolled out
    kept: int = 0  # groups kept for the update
    zero_variance: int = 0  # groups whose rewards were all equal
    rewards: list[float] = field(default_factory=list)  # of every rollout drawn
    seconds: float = 0.0


@dataclass
class StepData:
    episodes: list[Episode] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    per_turn: list[list[float]] = field(default_factory=list)
    groups: int = 0  # groups kept for the update
    drawn: int = 0  # groups rolled out
    zero_variance: int = 0  # of those, groups whose rewards were all equal
    generated: int = 0  # tokens sampled, discarded groups included
    drawn_episodes: list[Episode] = field(default_factory=list)  # every rollout of the step
    drawn_rewards: list[float] = field(default_factory=list)
    sources: dict[str, SourceTally] = field(default_factory=dict)
    weights_version: int = 0  # updates the rollout weights had seen
    began: float = 0.0  # perf_counter interval of the rollouts
    ended: float = 0.0

    def tally(
        self, source: str, episodes: list[Episode], rewards: list[float], size: int
    ) -> list[bool]:
        """Count one round of a source's rollouts (groups of ``size`` in order); whether
        each group's rewards were all equal."""
        own = self.sources.setdefault(source, SourceTally())
        self.generated += sum(t.generated_tokens for e in episodes for t in e.turns)
        self.drawn_episodes += episodes
        self.drawn_rewards += rewards
        own.rewards += rewards
        flat = [len(set(rewards[g : g + size])) == 1 for g in range(0, len(rewards), size)]
        own.drawn += len(flat)
        own.zero_variance += sum(flat)
        self.drawn += len(flat)
        self.zero_variance += sum(flat)
        return flat


class GroupSource(Protocol):
    name: str

    def groups(
        self, records: list[dict[str, Any]], step: int, wanted: int, data: StepData
    ) -> list[Group]:
        """Up to ``wanted`` scored groups for step ``step``; every rollout is tallied in
        ``data``."""
        ...

    def state(self) -> dict[str, Any]:
        """What a checkpoint needs to continue drawing as this run would."""
        ...

    def restore(self, state: dict[str, Any]) -> None: ...


class ShuffledDraw:
    """This rank's next items of a seeded shuffle, reshuffled every pass: rank r of w
    takes the shuffle's items r, r + w, r + 2w, ..."""

    def __init__(self, seed: int, rank: int = 0, world: int = 1):
        self.seed, self.rank, self.world = seed, rank, world
        self.position = 0  # items this rank drew so far

    def take(
        self, items: list[Item], n: int, skip: Callable[[Item], bool] = lambda _: False
    ) -> list[Item]:
        """The next ``n`` items that ``skip`` lets through (all of them, if it lets none)."""
        out: list[Item] = []
        passed = 0
        while len(out) < n:
            epoch, offset = divmod(self.position * self.world + self.rank, len(items))
            order = np.random.default_rng(self.seed + epoch).permutation(len(items))
            item = items[order[offset]]
            self.position += 1
            passed += 1
            if not skip(item) or passed > 2 * len(items):
                out.append(item)
        return out


def kept_groups(
    cfg: RLSection, draw: Callable[[int, int], tuple[list[Episode], list[float]]], wanted: int,
    data: StepData, source: str,
) -> list[Group]:  # fmt: skip
    """Rounds of ``draw(n, attempt)`` (n groups of ``group_size`` rollouts and their
    rewards) until ``wanted`` groups with a learning signal are kept, at most
    ``max_resample`` extra rounds (dynamic sampling, DAPO); without dynamic sampling every
    group of one round is kept."""
    kept: list[Group] = []
    size = cfg.group_size
    began = time.perf_counter()
    for attempt in range(1 + (cfg.max_resample if cfg.dynamic_sampling else 0)):
        if wanted - len(kept) <= 0:
            break
        episodes, rewards = draw(wanted - len(kept), attempt)
        for g, flat in enumerate(data.tally(source, episodes, rewards, size)):
            if not (flat and cfg.dynamic_sampling):
                members = slice(g * size, (g + 1) * size)
                kept.append((episodes[members], rewards[members]))
        if not cfg.dynamic_sampling:
            break
    own = data.sources.setdefault(source, SourceTally())
    own.kept += len(kept)
    own.seconds += time.perf_counter() - began
    return kept


class EpisodeRollouts:
    """Whole episodes of sampled tasks, ``group_size`` per task."""

    name = "episodes"

    def __init__(
        self,
        cfg: RLSection,
        harness: Harness,
        seed: int,
        rng: random.Random,
        rank: int = 0,
        world: int = 1,
    ):
        self.cfg, self.harness, self.seed = cfg, harness, seed
        self.rng = rng  # random rewards: the trainer's stream, or one of its own when ahead
        self.rank, self.world = rank, world
        self.draws = ShuffledDraw(seed, rank, world)

    def _tasks(self, records: list[dict[str, Any]], n: int) -> list[dict[str, Any]]:
        return self.draws.take(records, n)

    def groups(
        self, records: list[dict[str, Any]], step: int, wanted: int, data: StepData
    ) -> list[Group]:
        def draw(n: int, attempt: int) -> tuple[list[Episode], list[float]]:
            tasks = self._tasks(records, n)
            call = self.seed * 100_003 + step * 31 + attempt
            episodes = self.harness.run(
                tasks, self.cfg.group_size, seed=call * self.world + self.rank
            )
            return episodes, outcome_rewards(episodes, self.cfg, self.rng, tasks)

        return kept_groups(self.cfg, draw, wanted, data, self.name)

    def state(self) -> dict[str, Any]:
        return {"position": self.draws.position, "rng": self.rng.getstate()}

    def restore(self, state: dict[str, Any]) -> None:
        self.draws.position = int(state["position"])
        self.rng.setstate(state["rng"])


class StepRollouts:
    """A step's rollouts: each source its count of this rank's groups, advantages computed
    once over every group the step keeps (so an estimator that scales over the batch sees
    the whole batch)."""

    def __init__(self, cfg: RLSection, parts: list[tuple[GroupSource, int]]):
        self.cfg, self.parts = cfg, parts
        self.version = 0  # updates the engine's weights have seen: set by the trainer

    def collect(self, records: list[dict[str, Any]], step: int) -> StepData:
        cfg = self.cfg
        data = StepData(weights_version=self.version, began=time.perf_counter())
        kept = [g for source, n in self.parts for g in source.groups(records, step, n, data)]
        groups = [
            [Rollout(r, tuple(t.state for t in e.turns)) for e, r in zip(eps, rs, strict=True)]
            for eps, rs in kept
        ]
        per_group = advantages(cfg.advantage, groups, cfg.gamma, cfg.omega, cfg.scale)
        for (group_eps, group_rewards), per_turn in zip(kept, per_group, strict=True):
            for episode, reward, turns in zip(group_eps, group_rewards, per_turn, strict=True):
                cut = any(t.cut_off for t in episode.turns) and cfg.overlong == "filter"
                data.episodes.append(episode)
                data.rewards.append(reward)
                data.per_turn.append([0.0] * len(turns) if cut else turns)
        data.groups = len(kept)
        data.ended = time.perf_counter()
        return data

    def state(self) -> dict[str, Any]:
        return {source.name: source.state() for source, _ in self.parts}

    def restore(self, state: dict[str, Any]) -> None:
        for source, _ in self.parts:
            source.restore(state[source.name])


class RolloutSchedule:
    """Runs a source in turn with the update (``ahead`` False) or one step ahead of it, in
    a thread, on the weights before the update (``rl.max_staleness: 1``)."""

    def __init__(self, source: StepRollouts, ahead: bool):
        self.source = source
        self.pool = ThreadPoolExecutor(1, "rollouts") if ahead else None
        self.pending: Future[StepData] | None = None

    def take(self, records: list[dict[str, Any]], step: int) -> StepData:
        """Step ``step``'s rollouts: those already run ahead, else collected now."""
        pending, self.pending = self.pending, None
        return pending.result() if pending is not None else self.source.collect(records, step)

    def start(self, records: list[dict[str, Any]], step: int) -> None:
        """Begin step ``step``'s rollouts ahead (nothing when running in turn)."""
        if self.pool is not None:
            self.pending = self.pool.submit(self.source.collect, records, step)

    def wait(self) -> StepData | None:
        """The rollouts running ahead, once done (None when none run)."""
        return self.pending.result() if self.pending is not None else None

    def resume(self, data: StepData | None) -> None:
        """Rollouts a checkpoint saved as run ahead: the next ``take`` returns them. Their
        clock was the killed process's: only their length is kept."""
        if data is not None:
            length = data.ended - data.began
            data.ended = time.perf_counter()
            data.began = data.ended - length
            self.pending = Future()
            self.pending.set_result(data)

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)


def pipeline_figures(
    rollouts: StepData, began: float, ended: float, engine_free: float
) -> dict[str, float]:
    """How a step's update [began, ended] and the rollouts the engine ran meanwhile (the
    next step's when they run ahead, else this step's) shared the time: seconds they
    overlapped, and seconds the engine sat idle since its previous rollouts ended."""
    overlap = max(0.0, min(ended, rollouts.ended) - max(began, rollouts.began))
    return {
        "time_overlap_s": overlap,
        "time_engine_idle_s": max(0.0, rollouts.began - engine_free),
    }


def source_figures(own: SourceTally) -> dict[str, float]:
    """One source's figures of a step, named ``<source>_<figure>`` in the step's."""
    return {
        "groups_drawn": float(own.drawn),
        "groups_kept": float(own.kept),
        "zero_variance_share": own.zero_variance / max(1, own.drawn),
        "reward_mean": fmean(own.rewards) if own.rewards else 0.0,
        # rollout seconds per group with a learning signal: what the update can use
        "time_per_kept_group_s": own.seconds / max(1, own.kept),
    }


def rollout_figures(data: StepData) -> dict[str, float]:
    """Figures of every rollout of the step (groups dropped for lack of signal included)."""
    episodes, rewards = data.drawn_episodes, data.drawn_rewards
    seconds = data.ended - data.began
    turns = [t for e in episodes for t in e.turns]
    calls = sum(t.calls for t in turns)
    failures = sum(sum(t.call_errors.values()) for t in turns)
    per_source = {
        f"{name}_{figure}": value
        for name, own in data.sources.items()
        for figure, value in source_figures(own).items()
    }
    return per_source | {
        "reward_mean": fmean(rewards),
        "reward_std": pstdev(rewards),
        "success": fmean(e.success for e in episodes),
        "grounded_success": fmean(e.grounded for e in episodes),
        "groups": float(data.groups),
        "zero_variance_share": data.zero_variance / max(1, data.drawn),
        "response_tokens": data.generated / len(episodes),
        "turns": len(turns) / len(episodes),
        "tool_calls": calls / len(episodes),
        "tool_failure_rate": failures / calls if calls else 0.0,
        "compactions": fmean(e.compactions for e in episodes),
        "rollout_tokens_per_s": data.generated / max(seconds, 1e-9),
        "time_rollout_s": seconds,
    }
