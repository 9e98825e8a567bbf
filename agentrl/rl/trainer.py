"""The RL loop on DeepSpeed: rollouts (``rollouts.py``: tasks -> G episodes each through
the harness, or pivot states -> G one-turn samples each (``pivots.py``) -> rewards ->
advantages) -> PPO-clip updates (``update.py``) -> the rollout engine gets the
new weights (``weight_sync.py``) -> metrics -> checkpoint.

The rollout engine is ``harness.engine`` (``harness/build.py``): ``hf`` holds the very
module DeepSpeed updates (no copy) or, when ``base.precision`` is bf16 over float32 master
weights, a bf16 copy of it refreshed after every update (``bench/precision.py`` measured it
against autocast over the shared module); ``openai`` is a server (vLLM, ``agentrl serve``)
that loads a snapshot written after every update, checked at start against the trainer's
log-probs.

A killed run continues from its last checkpoint: DeepSpeed's model and optimizer state
plus the step, every RNG, the rollout source's state (task position, its own random
stream) and the rollouts that ran one step ahead, so the continued run trains on what the
uninterrupted one would have.

Under a launcher (``torchrun``, ``deepspeed``) every rank rolls out its own share of the
step's tasks on its own engine (or through the one shared server), DeepSpeed all-reduces
the gradients, and the ranks run equal numbers of micro-batches (``ranks.py``); each
rank's RNGs and rollout state go into the checkpoint, which continues only at the same
world size.
"""

from __future__ import annotations

import copy
import random
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from agentrl.config import (
    ConfigError,
    HarnessSection,
    RLSection,
    rl_engine_rule,
    rl_world_rule,
)
from agentrl.harness.build import trainer_engine
from agentrl.harness.engine import HFEngine
from agentrl.harness.loop import Harness
from agentrl.model.logprobs import causal_lm
from agentrl.model.lora import apply_lora, format_token_ids, trainable
from agentrl.precision import Resolved
from agentrl.rl.pivots import Pivot, PivotJudge
from agentrl.rl.ranks import gathered, merged_figures
from agentrl.rl.rollouts import RolloutSchedule, StepData, pipeline_figures, rollout_figures
from agentrl.rl.sources import build_rollouts
from agentrl.rl.update import PolicyUpdate
from agentrl.rl.weight_sync import check_served_weights, sync_weights
from agentrl.train import checkpoint
from agentrl.train.loop import ds_config, setup_distributed, skip_lone_allreduce

# checkpoints of another layout are not continued (checkpoint.load deletes them)
CHECKPOINT_LAYOUT = "rl-checkpoint-4"
RANK_SEED_STRIDE = 1_000_003  # rank r's own streams start at seed + r * stride


class Stopwatch:
    """The named intervals of one step, each [began, ended] on ``time.perf_counter``."""

    def __init__(self) -> None:
        self.spans: dict[str, tuple[float, float]] = {}

    @contextmanager
    def span(self, name: str) -> Iterator[None]:
        began = time.perf_counter()
        yield
        self.spans[name] = (began, time.perf_counter())

    def seconds(self, *names: str) -> float:
        return sum(self.spans[n][1] - self.spans[n][0] for n in names if n in self.spans)


class RLTrainer:
    """The policy on DeepSpeed, its rollout engine and harness, and the loop that trains
    it: ``train`` runs to ``rl.steps`` (resuming a checkpoint), ``update`` is one step's
    PPO-clip update, ``sync_weights`` hands the engine the new weights. Where a step's data
    comes from is ``self.rollouts`` (``rl.rollouts``'s sources; ``pivots`` the profiled
    pivot states they draw from, ``anchors`` the answer states ``rl.anchor_share`` draws)."""

    def __init__(
        self,
        cfg: RLSection,
        harness_cfg: HarnessSection,
        model: Any,
        tokenizer: Any,
        fmt: Any,
        registry: Any,
        seed: int,
        fingerprint: str,
        precision: Resolved,
        pivots: list[Pivot] | None = None,
        anchors: list[Pivot] | None = None,
        band: tuple[float, float] = (0.0, 1.0),
    ):
        import deepspeed

        if problem := rl_engine_rule(cfg, harness_cfg):  # params.yaml refuses it at load
            raise ConfigError(problem)
        self.cfg, self.seed = cfg, seed
        self.precision = precision
        self.rank, self.world = setup_distributed()
        if problem := rl_world_rule(cfg, self.world):  # the stage refuses it before loading
            raise ConfigError(problem)
        self.fingerprint = f"{fingerprint}:{CHECKPOINT_LAYOUT}:world{self.world}"
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        keep_start = cfg.kl_coef > 0 or cfg.track_drift
        reference = copy.deepcopy(model).eval() if keep_start else None
        model = apply_lora(model, cfg.lora, "rl.lora", format_token_ids(tokenizer, fmt))
        optimizer = torch.optim.AdamW(trainable(model), lr=cfg.lr, weight_decay=cfg.weight_decay)
        accum = max(1, cfg.mini_batch // cfg.micro_batch_size)
        config = ds_config(
            cfg.micro_batch_size, accum, cfg.grad_clip, cfg.zero_stage, self.world, precision
        )
        self.engine, self.optimizer, _, _ = deepspeed.initialize(
            model=model, optimizer=optimizer, config=config
        )
        skip_lone_allreduce(self.engine, self.world, cfg.zero_stage)
        self.tokenizer, self.fmt = tokenizer, fmt
        policy = causal_lm(self.engine.module)
        self.rollout_engine = trainer_engine(harness_cfg, policy, tokenizer, precision)
        self.harness = Harness(self.rollout_engine, tokenizer, fmt, registry, harness_cfg)
        own_seed = seed + self.rank * RANK_SEED_STRIDE
        self.rng = random.Random(own_seed)
        self.policy_update = PolicyUpdate(
            self.engine, cfg, precision, tokenizer.pad_token_id,
            harness_cfg.temperature or 1.0, reference, self.rng, self.world,
        )  # fmt: skip
        # rollouts ahead of the update draw their random rewards from their own stream
        rollout_rng = random.Random(own_seed + 1) if cfg.max_staleness else self.rng
        judge = PivotJudge(registry, fmt, self.harness.sandbox)
        self.rollouts = build_rollouts(
            cfg, self.harness, seed, rollout_rng, self.rank, self.world, pivots or [], judge,
            anchors, band,
        )  # fmt: skip

    def collect(self, records: list[dict[str, Any]], step: int) -> StepData:
        """Step ``step``'s rollouts, now, from the rollout source."""
        return self.rollouts.collect(records, step)

    def update(self, data: StepData) -> dict[str, float]:
        """One step's PPO-clip update over ``data`` (``update.py``); its figures."""
        return self.policy_update(data)

    # --- the loop --------------------------------------------------------------------------
    def train(
        self,
        records: list[dict[str, Any]],
        ckpt: Path,
        on_log: Callable[[int, dict[str, float]], None],
    ) -> tuple[int, list[dict[str, float]], int]:
        """Run to ``cfg.steps``; (steps, history, step resumed from)."""
        from tqdm import tqdm

        schedule = RolloutSchedule(self.rollouts, ahead=bool(self.cfg.max_staleness))
        start, history = self._resume(ckpt, schedule)
        ckpt.mkdir(parents=True, exist_ok=True)
        # the engine starts on the weights it was built with: give it these (a resumed
        # run's included)
        self.sync_weights(ckpt)
        if not isinstance(self.rollout_engine, HFEngine):  # and check that a server took them
            gap = check_served_weights(
                self.rollout_engine, self.engine.module, self.tokenizer, self.fmt, records[0],
                self.cfg.logprob_chunk, self.cfg.sync_tolerance, self.precision,
            )  # fmt: skip
            print(f"rl: the rollout server samples from the trainer's weights (gap {gap:.1e})")
        self.rollouts.version = start
        bar = tqdm(total=self.cfg.steps, initial=start, desc="rl", disable=self.rank != 0)
        engine_free = time.perf_counter()  # when the engine last finished a step's rollouts
        try:
            for step in range(start, self.cfg.steps):
                watch = Stopwatch()
                with watch.span("wait"):  # for rollouts: all of them when run in turn
                    data = schedule.take(records, step)
                if step + 1 < self.cfg.steps:  # max_staleness 1: on the weights before the update
                    schedule.start(records, step + 1)
                with watch.span("update"):
                    figures = self.update(data)
                with watch.span("join"):  # rollouts ahead end before new weights go out
                    ahead = schedule.wait()
                with watch.span("sync"):
                    self.sync_weights(ckpt)
                self.rollouts.version = step + 1
                metrics = (
                    rollout_figures(data)
                    | figures
                    | pipeline_figures(ahead or data, *watch.spans["update"], engine_free)
                    | {
                        "time_sync_s": watch.seconds("sync"),
                        "time_trainer_idle_s": watch.seconds("wait", "join"),
                        "staleness": float(step - data.weights_version),
                    }
                )
                metrics = merged_figures(gathered(metrics, self.world))
                engine_free = (ahead or data).ended
                history.append({"step": step + 1, **metrics})
                on_log(step + 1, metrics)
                bar.update(1)
                bar.set_postfix(
                    reward=f"{metrics['reward_mean']:.3f}",
                    grounded=f"{metrics['grounded_success']:.3f}",
                    groups=int(metrics["groups"]),
                    s=f"{metrics['time_rollout_s'] + metrics.get('time_update_s', 0):.0f}",
                )
                done = step + 1
                if done % self.cfg.checkpoint_every == 0 or done == self.cfg.steps:
                    self._checkpoint(ckpt, done, history, ahead)
        finally:
            schedule.close()
        bar.close()
        return self.cfg.steps, history, start

    def sync_weights(self, ckpt: Path) -> None:
        """Give the rollout engine the trainer's weights."""
        sync_weights(self.rollout_engine, self.engine.module, ckpt, self.rank, self.world)

    def _resume(self, ckpt: Path, schedule: RolloutSchedule) -> tuple[int, list[dict[str, float]]]:
        """The step and history ``ckpt`` holds (none: 0, []); its RNGs, rollout source
        state and the rollouts that ran ahead are restored."""
        client = checkpoint.load(self.engine, ckpt, self.fingerprint, self.rank)
        if client is None:
            return 0, []
        own = client["ranks"][self.rank]
        torch.set_rng_state(own["torch_rng"])
        self.rng.setstate(own["python_rng"])
        self.rollouts.restore(own["rollouts"])
        schedule.resume(own["ahead"])
        return int(client["step"]), list(client["history"])

    def _checkpoint(
        self, ckpt: Path, step: int, history: list[dict[str, float]], ahead: StepData | None
    ) -> None:
        """Everything a resumed run needs to go on as this one would, the rollouts that
        already ran ahead of ``step`` on the weights before it (``ahead``) included: the
        resumed run trains on them instead of drawing others on newer weights. DeepSpeed
        saves rank 0's client state, so it holds every rank's own part."""
        own = {
            "torch_rng": torch.get_rng_state(),
            "python_rng": self.rng.getstate(),
            "rollouts": self.rollouts.state(),
            "ahead": ahead,
        }
        client = {"step": step, "history": history, "ranks": gathered(own, self.world)}
        checkpoint.save(self.engine, ckpt, step, self.fingerprint, self.rank, client)
