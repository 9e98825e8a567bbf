"""Where a step's training data comes from, kept apart from the update: a rollout source
turns tasks into scored, advantaged episodes (``StepData``), and a schedule runs it either
in turn with the update or one step ahead of it.

``EpisodeRollouts`` is the full-episode source: ``tasks_per_step`` tasks of a seeded
shuffle, ``group_size`` episodes each through the harness, outcome rewards, dynamic
sampling, and advantages computed once over every group the step keeps. Under several
ranks each takes every world-th task of the same shuffle (its share of ``tasks_per_step``)
and samples from its own streams; ``batch`` scaling then runs over the rank's share. Another source
(one-turn rollouts from intermediate states, say) implements ``collect``, ``state`` and
``restore`` and leaves the trainer as it is.
"""

from __future__ import annotations

import random
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from statistics import fmean, pstdev
from typing import Any, Protocol

import numpy as np

from agentrl.config import RLSection
from agentrl.harness.loop import Harness
from agentrl.harness.records import Episode
from agentrl.rl.advantages import Rollout, advantages
from agentrl.rl.rewards import outcome_rewards


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
    weights_version: int = 0  # updates the rollout weights had seen
    began: float = 0.0  # perf_counter interval of the rollouts
    ended: float = 0.0


class RolloutSource(Protocol):
    version: int  # updates the engine's weights have seen: set by the trainer after a sync

    def collect(self, records: list[dict[str, Any]], step: int) -> StepData: ...

    def state(self) -> dict[str, Any]:
        """What a checkpoint needs to continue drawing as this run would."""
        ...

    def restore(self, state: dict[str, Any]) -> None: ...


class EpisodeRollouts:
    """Whole episodes of sampled tasks, ``group_size`` per task."""

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
        self.share = cfg.tasks_per_step // world  # the trainer checks that it divides
        self.position = 0  # tasks this rank drew so far
        self.version = 0

    def _tasks(self, records: list[dict[str, Any]], n: int) -> list[dict[str, Any]]:
        """This rank's next ``n`` tasks of a seeded shuffle, reshuffled every pass: rank r
        of w takes the shuffle's tasks r, r + w, r + 2w, ..."""
        out = []
        for _ in range(n):
            epoch, offset = divmod(self.position * self.world + self.rank, len(records))
            order = np.random.default_rng(self.seed + epoch).permutation(len(records))
            out.append(records[order[offset]])
            self.position += 1
        return out

    def collect(self, records: list[dict[str, Any]], step: int) -> StepData:
        """Rollouts of this rank's share of ``tasks_per_step`` tasks with a learning signal, resampling groups
        whose rewards are all equal at most ``max_resample`` times (dynamic sampling).
        Advantages are computed once over every group the step keeps, so an estimator
        that scales over the batch sees the whole batch."""
        cfg = self.cfg
        data = StepData(weights_version=self.version, began=time.perf_counter())
        kept: list[tuple[list[Episode], list[float]]] = []
        wanted = self.share
        for attempt in range(1 + (cfg.max_resample if cfg.dynamic_sampling else 0)):
            tasks = self._tasks(records, wanted - len(kept))
            call = self.seed * 100_003 + step * 31 + attempt
            episodes = self.harness.run(tasks, cfg.group_size, seed=call * self.world + self.rank)
            rewards = outcome_rewards(episodes, cfg, self.rng)
            data.generated += sum(t.generated_tokens for e in episodes for t in e.turns)
            data.drawn_episodes += episodes
            data.drawn_rewards += rewards
            for g in range(len(tasks)):
                members = slice(g * cfg.group_size, (g + 1) * cfg.group_size)
                flat = len(set(rewards[members])) == 1
                data.zero_variance += flat
                data.drawn += 1
                if not (flat and cfg.dynamic_sampling):
                    kept.append((episodes[members], rewards[members]))
            if len(kept) >= wanted or not cfg.dynamic_sampling:
                break
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
        return {"position": self.position, "rng": self.rng.getstate()}

    def restore(self, state: dict[str, Any]) -> None:
        self.position = int(state["position"])
        self.rng.setstate(state["rng"])


class RolloutSchedule:
    """Runs a source in turn with the update (``ahead`` False) or one step ahead of it, in
    a thread, on the weights before the update (``rl.max_staleness: 1``)."""

    def __init__(self, source: RolloutSource, ahead: bool):
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


def rollout_figures(data: StepData) -> dict[str, float]:
    """Figures of every rollout of the step (groups dropped for lack of signal included)."""
    episodes, rewards = data.drawn_episodes, data.drawn_rewards
    seconds = data.ended - data.began
    turns = [t for e in episodes for t in e.turns]
    calls = sum(t.calls for t in turns)
    failures = sum(sum(t.call_errors.values()) for t in turns)
    return {
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
