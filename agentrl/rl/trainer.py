"""The RL loop on DeepSpeed: tasks -> G rollouts each through the harness -> rewards ->
advantages -> PPO-clip updates -> the rollout engine gets the new weights -> metrics ->
checkpoint.

The rollout engine is ``harness.engine``: ``hf`` holds the very module DeepSpeed updates
(no copy) or, when ``base.precision`` is bf16 over float32 master weights, a bf16 copy
of it refreshed after every update (``bench/precision.py`` measured it against autocast
over the shared module); ``openai`` is a server (vLLM, ``agentrl serve``) that loads a snapshot written
after every update (``weight_sync.py``), checked at start against the trainer's log-probs.

A killed run continues from its last checkpoint: DeepSpeed's model and optimizer state
plus the step, the task position, every RNG (the rollouts' own stream included) and the
rollouts that ran one step ahead, so the continued run trains on what the uninterrupted
one would have.
"""

from __future__ import annotations

import copy
import random
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from statistics import fmean, pstdev
from typing import Any

import numpy as np
import torch

from agentrl.config import ConfigError, HarnessSection, RLSection, rl_engine_rule
from agentrl.harness.build import openai_engine
from agentrl.harness.engine import HFEngine
from agentrl.harness.loop import Harness
from agentrl.harness.records import Episode
from agentrl.model.logprobs import causal_lm
from agentrl.model.lora import apply_lora, format_token_ids, trainable
from agentrl.precision import Resolved, autocast, generation_model
from agentrl.rl.advantages import Rollout, advantages
from agentrl.rl.batch import (
    TrainSequence,
    collate,
    prefix_key,
    shared_token_logprobs,
    to_sequences,
)
from agentrl.rl.loss import LossConfig, policy_loss
from agentrl.rl.rewards import outcome_rewards
from agentrl.rl.weight_sync import check_served_weights, write_snapshot
from agentrl.train import checkpoint
from agentrl.train.loop import ds_config, setup_distributed, skip_lone_allreduce


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
    position_before: int = 0  # tasks drawn before this step's
    weights_version: int = 0  # updates the rollout weights had seen
    began: float = 0.0  # perf_counter interval of the rollouts
    ended: float = 0.0


class RLTrainer:
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
    ):
        import deepspeed

        if problem := rl_engine_rule(cfg, harness_cfg):  # params.yaml refuses it at load
            raise ConfigError(problem)
        self.cfg, self.seed, self.fingerprint = cfg, seed, fingerprint
        self.precision = precision
        self.rank, self.world = setup_distributed()
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        self.reference = copy.deepcopy(model).eval() if cfg.kl_coef > 0 else None
        self.pad_id = tokenizer.pad_token_id
        self.accum = max(1, cfg.mini_batch // cfg.micro_batch_size)
        model = apply_lora(model, cfg.lora, "rl.lora", format_token_ids(tokenizer, fmt))
        optimizer = torch.optim.AdamW(trainable(model), lr=cfg.lr, weight_decay=cfg.weight_decay)
        config = ds_config(
            cfg.micro_batch_size, self.accum, cfg.grad_clip, cfg.zero_stage, self.world, precision
        )
        self.engine, self.optimizer, _, _ = deepspeed.initialize(
            model=model, optimizer=optimizer, config=config
        )
        skip_lone_allreduce(self.engine, self.world, cfg.zero_stage)
        self.tokenizer, self.fmt = tokenizer, fmt
        if harness_cfg.engine == "openai":
            self.rollout_engine = openai_engine(harness_cfg, tokenizer)
        else:  # the module DeepSpeed updates, or its copy in the generation precision
            policy = causal_lm(self.engine.module)
            self.rollout_engine = HFEngine(
                generation_model(policy, precision), tokenizer, bucket=harness_cfg.engine_batch
            )
        self.harness = Harness(self.rollout_engine, tokenizer, fmt, registry, harness_cfg)
        self.loss_cfg = LossConfig(
            cfg.clip_low, cfg.clip_high, cfg.aggregation, cfg.kl_coef, cfg.kl_estimator,
            cfg.mismatch, cfg.mismatch_cap,
        )  # fmt: skip
        self.rng = random.Random(seed)
        # rollouts ahead of the update draw their random rewards from their own stream
        self.rollout_rng = random.Random(seed + 1) if cfg.max_staleness else self.rng
        self.position = 0  # tasks drawn so far
        self.version = 0  # updates the rollout engine's weights have seen

    # --- tasks and rollouts --------------------------------------------------------------
    def _tasks(self, records: list[dict[str, Any]], n: int) -> list[dict[str, Any]]:
        """The next ``n`` tasks of a seeded shuffle, reshuffled every pass."""
        out = []
        for _ in range(n):
            epoch, offset = divmod(self.position, len(records))
            order = np.random.default_rng(self.seed + epoch).permutation(len(records))
            out.append(records[order[offset]])
            self.position += 1
        return out

    def collect(self, records: list[dict[str, Any]], step: int) -> StepData:
        """Rollouts of ``tasks_per_step`` tasks with a learning signal, resampling groups
        whose rewards are all equal at most ``max_resample`` times (dynamic sampling).
        Advantages are computed once over every group the step keeps, so an estimator
        that scales over the batch sees the whole batch."""
        cfg = self.cfg
        data = StepData(
            position_before=self.position, weights_version=self.version, began=time.perf_counter()
        )
        kept: list[tuple[list[Episode], list[float]]] = []
        wanted = cfg.tasks_per_step
        for attempt in range(1 + (cfg.max_resample if cfg.dynamic_sampling else 0)):
            tasks = self._tasks(records, wanted if attempt == 0 else wanted - len(kept))
            episodes = self.harness.run(
                tasks, cfg.group_size, seed=self.seed * 100_003 + step * 31 + attempt
            )
            rewards = outcome_rewards(episodes, cfg, self.rollout_rng)
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

    # --- update ----------------------------------------------------------------------------
    @torch.no_grad()
    def _logprobs(self, model: Any, sequences: list[TrainSequence]) -> list[torch.Tensor]:
        order = sorted(range(len(sequences)), key=lambda i: prefix_key(sequences[i]))
        out: list[torch.Tensor] = [torch.empty(0)] * len(sequences)
        for start in range(0, len(order), self.cfg.micro_batch_size):
            rows = order[start : start + self.cfg.micro_batch_size]
            with autocast(self.precision):
                logp, _ = shared_token_logprobs(
                    model, [sequences[i] for i in rows], self.pad_id, self.cfg.logprob_chunk,
                    entropy=False,
                )  # fmt: skip
            for k, i in enumerate(rows):
                out[i] = logp[k, : len(sequences[i].ids)]
        return out

    def update(self, data: StepData) -> dict[str, float]:
        cfg = self.cfg
        sequences = [s for s in to_sequences(data.episodes, data.per_turn) if any(s.mask)]
        if not sequences:
            return {"update_skipped": 1.0}
        tick = time.perf_counter()
        plan = [self._minis(sequences) for _ in range(cfg.epochs)]
        # the first mini-batch trains on the weights that made the rollouts, so its old
        # log-probs are its own forward pass, detached (set in _micro_loss): only the
        # sequences trained after an optimizer step need a pass of their own
        first = {int(i) for i in plan[0][0]}
        stale = [s for i, s in enumerate(sequences) if i not in first]
        self.engine.eval()
        for seq, logp in zip(stale, self._logprobs(self.engine.module, stale), strict=True):
            seq.old_logp = logp.tolist()
        if self.reference is not None:
            for seq, logp in zip(sequences, self._logprobs(self.reference, sequences), strict=True):
                seq.ref_logp = logp.tolist()
        reference_s = time.perf_counter() - tick
        self.engine.train()
        tick, figures, tokens = time.perf_counter(), [], 0
        for minis in plan:
            for mini in minis:
                micros = np.array_split(mini, self.accum)
                for micro_index in micros:
                    micro = [sequences[i] for i in micro_index]
                    if not micro:  # keep DeepSpeed's accumulation count whole
                        micro = [sequences[int(mini[0])]]
                        scale = 0.0
                    else:
                        scale = 1.0
                    loss, stats = self._micro_loss(micro)
                    self.engine.backward(loss * scale)
                    self.engine.step()
                    tokens += sum(len(s.ids) for s in micro)
                    if scale:
                        figures.append(stats)
        update_s = time.perf_counter() - tick
        merged = {k: fmean(f[k] for f in figures) for k in figures[0]} if figures else {}
        return merged | {
            "time_reference_s": reference_s,
            "time_update_s": update_s,
            "update_tokens_per_s": tokens / max(update_s, 1e-9),
            "sequences": float(len(sequences)),
        }

    def _minis(self, sequences: list[TrainSequence]) -> list[np.ndarray]:
        """One epoch's mini-batches of sequence indices: prompts in a shuffled order, the
        sequences of one prompt (a group) adjacent, so a micro-batch runs it once."""
        by_prompt: dict[tuple[int, ...], list[int]] = {}
        for i, seq in enumerate(sequences):
            by_prompt.setdefault(prefix_key(seq), []).append(i)
        groups = list(by_prompt.values())
        order = [i for group in self.rng.sample(groups, len(groups)) for i in group]
        return np.array_split(np.array(order), max(1, len(sequences) // self.cfg.mini_batch))

    def _micro_loss(self, micro: list[TrainSequence]) -> tuple[torch.Tensor, dict[str, float]]:
        batch = collate(micro, self.pad_id)
        width = batch["input_ids"].shape[1]

        def padded(name: str) -> torch.Tensor:
            rows = [getattr(s, name) for s in micro]
            return torch.tensor([r + [0.0] * (width - len(r)) for r in rows])

        with autocast(self.precision):  # log-probs come out float32: the head casts
            logp, entropy = shared_token_logprobs(
                self.engine, micro, self.pad_id, self.cfg.logprob_chunk
            )
        for i, seq in enumerate(micro):
            if seq.old_logp is None:  # first mini-batch: still the rollout weights
                seq.old_logp = logp[i, : len(seq.ids)].detach().tolist()
        ref = padded("ref_logp") if self.reference is not None else None
        loss, stats = policy_loss(
            logp, padded("old_logp"), batch["rollout_logp"], batch["advantages"],
            batch["mask"], self.loss_cfg, ref,
        )  # fmt: skip
        mask = batch["mask"]
        stats["entropy"] = float((entropy.detach() * mask).sum() / mask.sum().clamp(min=1))
        return loss, stats

    # --- the loop --------------------------------------------------------------------------
    def train(
        self,
        records: list[dict[str, Any]],
        ckpt: Path,
        on_log: Callable[[int, dict[str, float]], None],
    ) -> tuple[int, list[dict[str, float]], int]:
        """Run to ``cfg.steps``; (steps, history, step resumed from)."""
        from tqdm import tqdm

        start, history, saved = self._resume(ckpt)
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
        self.version = start
        bar = tqdm(total=self.cfg.steps, initial=start, desc="rl", disable=self.rank != 0)
        # max_staleness 1: step k+1's rollouts run in this thread while step k updates
        pool = ThreadPoolExecutor(1, "rollouts") if self.cfg.max_staleness else None
        ahead: Future[StepData] | None = None
        if saved is not None:  # the rollouts that ran ahead of the checkpoint
            ahead = Future()
            ahead.set_result(saved)
        engine_free = time.perf_counter()  # when the engine last finished a step's rollouts
        try:
            for step in range(start, self.cfg.steps):
                tick = time.perf_counter()
                data = ahead.result() if ahead else self.collect(records, step)
                waited = time.perf_counter() - tick
                ahead = None
                if pool is not None and step + 1 < self.cfg.steps:
                    ahead = pool.submit(self.collect, records, step + 1)
                began = time.perf_counter()
                figures = self.update(data) if data.episodes else {"update_skipped": 1.0}
                ended = time.perf_counter()
                # the rollouts ahead end before new weights go out: one version per step
                next_data = ahead.result() if ahead is not None else None
                joined = time.perf_counter() - ended
                sync_s = self.sync_weights(ckpt)
                self.version = step + 1
                metrics = (
                    rollout_figures(data, data.ended - data.began)
                    | figures
                    | pipeline_figures(next_data or data, began, ended, engine_free)
                    | {
                        "time_sync_s": sync_s,
                        "time_trainer_idle_s": waited + joined,
                        "staleness": float(step - data.weights_version),
                    }
                )
                engine_free = (next_data or data).ended
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
                    self._checkpoint(ckpt, done, history, next_data)
        finally:
            if pool is not None:
                pool.shutdown(wait=True, cancel_futures=True)
        bar.close()
        return self.cfg.steps, history, start

    def sync_weights(self, ckpt: Path) -> float:
        """Give the rollout engine the trainer's weights; seconds it took."""
        tick = time.perf_counter()
        if isinstance(self.rollout_engine, HFEngine):
            policy = causal_lm(self.engine.module)
            if self.rollout_engine.model is not policy:  # the bf16 copy: refresh it
                copy_weights(policy, self.rollout_engine.model)
            if self.rollout_engine.cache is not None:
                self.rollout_engine.cache.clear()  # keys and values of the old weights
            return time.perf_counter() - tick
        snapshot = write_snapshot(self.engine.module, ckpt / "serving", self.rank)
        if self.rank == 0:  # one server for every rank: one reload
            self.rollout_engine.load_weights(snapshot)
        if self.world > 1:
            torch.distributed.barrier()
        return time.perf_counter() - tick

    def _resume(self, ckpt: Path) -> tuple[int, list[dict[str, float]], StepData | None]:
        """The step, history and rollouts run ahead that ``ckpt`` holds (none: 0, [], None)."""
        client = checkpoint.load(self.engine, ckpt, self.fingerprint, self.rank)
        if client is None:
            return 0, [], None
        torch.set_rng_state(client["torch_rng"])
        self.rng.setstate(client["python_rng"])
        if self.rollout_rng is not self.rng:
            self.rollout_rng.setstate(client["rollout_rng"])
        self.position = int(client["position"])
        ahead = client.get("ahead")
        if ahead is not None:  # its clock was the killed process's: keep only its length
            ahead.began, ahead.ended = (
                time.perf_counter() - (ahead.ended - ahead.began),
                time.perf_counter(),
            )
        return int(client["step"]), list(client["history"]), ahead

    def _checkpoint(
        self, ckpt: Path, step: int, history: list[dict[str, float]], ahead: StepData | None
    ) -> None:
        """Everything a resumed run needs to go on as this one would: the weights and
        optimizer, the task position, every RNG, and the rollouts that already ran ahead
        of ``step`` on the weights before it (``ahead``), which the resumed run trains on
        instead of drawing other tasks, samples and random rewards on newer weights."""
        client = {
            "step": step,
            "history": history,
            "position": self.position,
            "torch_rng": torch.get_rng_state(),
            "python_rng": self.rng.getstate(),
            "ahead": ahead,
        }
        if self.rollout_rng is not self.rng:
            client["rollout_rng"] = self.rollout_rng.getstate()
        checkpoint.save(self.engine, ckpt, step, self.fingerprint, self.rank, client)


@torch.no_grad()
def copy_weights(source: Any, target: Any) -> None:
    """Copy ``source``'s parameters and buffers into ``target`` (same modules, any dtype)."""
    target_state = target.state_dict()
    for name, value in source.state_dict().items():
        target_state[name].copy_(value)


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


def rollout_figures(data: StepData, seconds: float) -> dict[str, float]:
    """Figures of every rollout of the step (groups dropped for lack of signal included)."""
    episodes, rewards = data.drawn_episodes, data.drawn_rewards
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
