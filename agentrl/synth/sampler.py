"""One sample from (seed, split, index): family, difficulty, fresh world, tool surfaces,
trajectory, verification. Each sample has its own RNG, so output never depends on how
many workers made it or in which order.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Any

from agentrl.config import EVAL_SPLITS, TRACE_SPLITS, SplitSection, TeacherSection
from agentrl.envs.registry import Registry
from agentrl.envs.world import World
from agentrl.synth import verification
from agentrl.synth.teacher import OpenAITeacher, TeacherError
from agentrl.synth.trajectory import Trajectory, oracle_trajectory, restart_contexts
from agentrl.tools.schema import Surface

KNOBS = ("hops", "ops", "horizon", "num_tools")


@dataclass(frozen=True)
class Outcome:
    index: int
    family: str
    record: dict[str, Any] | None
    reason: str | None  # rejection reason when record is None


def approx_tokens(record: dict[str, Any]) -> int:
    """Token estimate at 4 bytes per token (our byte-level BPE is trained later, in init)."""
    return (
        len(json.dumps(record["messages"], ensure_ascii=False)) // 4
        + len(json.dumps(record["tools"])) // 4
    )


def eligible_families(registry: Registry, split: str, families: list[str] | None) -> list[str]:
    names = families if families is not None else list(registry.envs)
    if split == "heldout_tools":  # a family can be held out only if all its tools have vocabularies
        names = [
            f
            for f in names
            if all(registry.partition.has_vocab(t) for t in registry.envs[f].toolbox.TOOLS)
        ]
    return names


class Sampler:
    def __init__(self, registry: Registry, seed: int, teacher: TeacherSection):
        self.registry = registry
        self.seed = seed
        self.teacher = OpenAITeacher(teacher) if teacher.kind == "openai" else None

    def _surfaces(
        self, rng: random.Random, tools: list[str], heldout: bool, rename: bool
    ) -> dict[str, Surface]:
        for _ in range(20):
            surfaces = {
                t: self.registry.partition.sample(
                    rng, t, self.registry.schema(t), heldout=heldout, rename=rename
                )
                for t in tools
            }
            if len({s.name for s in surfaces.values()}) == len(surfaces):
                return surfaces
        raise RuntimeError(f"could not draw distinct tool names for {tools}")

    def _offered(
        self, rng: random.Random, family: str, needed: list[str], num_tools: int, heldout: bool
    ) -> list[str]:
        own = self.registry.envs[family].toolbox.TOOLS
        spare = [t for t in own if t not in needed] + [
            t for t in self.registry.function if t not in own
        ]
        if heldout:
            spare = [t for t in spare if self.registry.partition.has_vocab(t)]
        offered = needed + rng.sample(spare, min(len(spare), max(0, num_tools - len(needed))))
        rng.shuffle(offered)
        return offered

    def copy_item(self, split: str, index: int) -> Outcome:
        """'Repeat exactly: ...': span copying, the skill tiny models lack."""
        rng = random.Random(f"{self.seed}:{split}:copy:{index}")
        world = World(rng, "train")
        draws = [world.entity, world.word, lambda: str(world.number(0, 99999))]
        span = " ".join(str(rng.choice(draws)()) for _ in range(rng.randint(1, 8)))
        record = {
            "id": f"{split}-copy-{index:08d}",
            "split": split,
            "family": "copy",
            "difficulty": {},
            "depth": 0,
            "messages": [
                {"role": "user", "content": f"Repeat exactly: {span}"},
                {"role": "assistant", "content": span},
            ],
            "tools": [],
            "verifier": {"kind": "exact", "answer": span},
            "env": None,
            "atoms": world.atoms,
            "meta": {"teacher": "template", "recovery": None},
        }
        record["meta"] |= {"turns": 1, "approx_tokens": approx_tokens(record)}
        return Outcome(index, "copy", record, None)

    def sample(self, split: str, cfg: SplitSection, families: list[str], index: int) -> Outcome:
        rng = random.Random(f"{self.seed}:{split}:{index}")
        family = rng.choice(families)
        env = self.registry.envs[family]
        knobs = {k: rng.randint(*getattr(cfg.difficulty, k)) for k in KNOBS}
        world = World(rng, "eval" if split in EVAL_SPLITS else "train")
        task = env.sample(rng, world, knobs)
        heldout = split == "heldout_tools"
        offered = self._offered(rng, family, task.needed_tools, knobs["num_tools"], heldout)
        rename = heldout or rng.random() < cfg.rename_prob
        surfaces = self._surfaces(rng, offered, heldout, rename)
        env_block = {
            "family": family,
            "state": task.state,
            "surfaces": {t: s.to_json() for t, s in surfaces.items()},
        }
        env_block = json.loads(json.dumps(env_block))  # exactly what a reader of the shard gets
        tools, _ = self.registry.bind(env_block)
        recovery = rng.random() < cfg.recovery_prob
        traj: Trajectory
        if self.teacher is not None and split in TRACE_SPLITS:
            try:
                traj = self.teacher.trajectory(task, tools, seed=rng.randrange(2**31))
            except TeacherError:
                return Outcome(index, family, None, "teacher_error")
        else:
            traj = oracle_trajectory(
                env, task, tools, rng, self.registry.partition, recovery, cfg.thoughts
            )
        record = {
            "id": f"{split}-{index:08d}",
            "split": split,
            "family": family,
            "difficulty": {k: knobs[k] for k in KNOBS},
            "depth": task.depth,
            "messages": traj.messages,
            "tools": tools.schemas,
            "verifier": task.verifier,
            "env": env_block,
            "atoms": world.atoms,
            "meta": {
                "teacher": "openai"
                if self.teacher is not None and split in TRACE_SPLITS
                else "oracle",
                "recovery": traj.recovery,
                "turns": sum(m["role"] == "assistant" for m in traj.messages),
            },
        }
        record["meta"]["approx_tokens"] = approx_tokens(record)
        reason = verification.check(self.registry, record)
        if reason is not None:
            return Outcome(index, family, None, reason)
        if record["meta"]["approx_tokens"] < cfg.min_tokens:
            return Outcome(index, family, None, "too_short")
        if cfg.summary_prob and rng.random() < cfg.summary_prob:
            contexts = restart_contexts(traj.messages, rng)
            if contexts is not None:
                record["contexts"] = contexts
        if split == "rl":  # RL gets the task, not the answer: the prompt only; the expert
            # trajectory stays apart, for one-turn rollouts from its intermediate states
            record["messages"] = traj.messages[:1]
            record["expert"] = traj.messages
        return Outcome(index, family, record, None)
