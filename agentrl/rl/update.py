"""One step's PPO-clip update of the policy on DeepSpeed, from a step's rollouts.

The sequences of a step (``batch.to_sequences``: one per context an episode's turns were
sampled in) are cut into ``rl.epochs`` x mini-batches (a group's sequences kept together,
so one forward pass covers its shared prompt) and micro-batches that DeepSpeed accumulates.
The loss (``loss.policy_loss``) reads three sets of log-probs per token: the rollout
engine's (mismatch correction), the old policy's (the clip ratio) and, with ``rl.kl_coef``
or ``rl.track_drift``, the starting model's.
"""

from __future__ import annotations

import random
import time
from statistics import fmean
from typing import Any

import numpy as np
import torch

from agentrl.config import RLSection
from agentrl.precision import Resolved, autocast
from agentrl.rl.batch import (
    TrainSequence,
    collate,
    drift_from_start,
    prefix_key,
    shared_token_logprobs,
    to_sequences,
)
from agentrl.rl.loss import LossConfig, policy_loss
from agentrl.rl.ranks import most
from agentrl.rl.rollouts import StepData


class PolicyUpdate:
    """PPO-clip epochs on ``engine`` (DeepSpeed's), called once a step with its data.

    ``reference`` is the frozen starting model (None without a KL term or drift tracking);
    ``rng`` orders the mini-batches (the trainer's stream, checkpointed with it);
    ``temperature`` is the rollouts' sampling temperature, which the loss's log-probs use
    so they are those of the distribution the rollouts sampled from."""

    def __init__(
        self,
        engine: Any,
        cfg: RLSection,
        precision: Resolved,
        pad_id: int,
        temperature: float,
        reference: Any,
        rng: random.Random,
        world: int,
    ):
        self.engine, self.cfg, self.precision = engine, cfg, precision
        self.pad_id, self.temperature, self.reference = pad_id, temperature, reference
        self.rng, self.world = rng, world
        self.accum = max(1, cfg.mini_batch // cfg.micro_batch_size)
        self.loss_cfg = LossConfig(
            cfg.clip_low, cfg.clip_high, cfg.aggregation, cfg.kl_coef, cfg.kl_estimator,
            cfg.mismatch, cfg.mismatch_cap,
        )  # fmt: skip

    @torch.no_grad()
    def logprobs(self, model: Any, sequences: list[TrainSequence]) -> list[torch.Tensor]:
        """Each sequence's token log-probs under ``model``, without gradients; sequences
        sharing a prompt run in one micro-batch."""
        order = sorted(range(len(sequences)), key=lambda i: prefix_key(sequences[i]))
        out: list[torch.Tensor] = [torch.empty(0)] * len(sequences)
        for start in range(0, len(order), self.cfg.micro_batch_size):
            rows = order[start : start + self.cfg.micro_batch_size]
            with autocast(self.precision):
                logp, _ = shared_token_logprobs(
                    model, [sequences[i] for i in rows], self.pad_id, self.cfg.logprob_chunk,
                    entropy=False, temperature=self.temperature,
                )  # fmt: skip
            for k, i in enumerate(rows):
                out[i] = logp[k, : len(sequences[i].ids)]
        return out

    def __call__(self, data: StepData) -> dict[str, float]:
        """One step's PPO-clip epochs over ``data``. Every rank runs the largest mini-batch
        count of any rank; micro-batches a rank has no sequences for run a sequence at
        zero weight, so DeepSpeed's accumulation and all-reduce stay in step."""
        cfg = self.cfg
        sequences = [s for s in to_sequences(data.episodes, data.per_turn) if any(s.mask)]
        count = max(1, len(sequences) // cfg.mini_batch) if sequences else 0
        count = most(count, self.world)
        if not count:
            return {"update_skipped": 1.0}
        filler = sequences[0] if sequences else self._filler(data)
        tick = time.perf_counter()
        plan = [self._minis(sequences, count) for _ in range(cfg.epochs)]
        # the first mini-batch trains on the weights that made the rollouts, so its old
        # log-probs are its own forward pass, detached (set in _micro_loss): only the
        # sequences trained after an optimizer step need a pass of their own
        first = {int(i) for i in plan[0][0]}
        stale = [s for i, s in enumerate(sequences) if i not in first]
        self.engine.eval()
        for seq, logp in zip(stale, self.logprobs(self.engine.module, stale), strict=True):
            seq.old_logp = logp.tolist()
        drift = {}
        if self.reference is not None:
            for seq, logp in zip(sequences, self.logprobs(self.reference, sequences), strict=True):
                seq.ref_logp = logp.tolist()
            drift = drift_from_start(sequences) if cfg.track_drift else {}
        reference_s = time.perf_counter() - tick
        self.engine.train()
        tick, figures, tokens = time.perf_counter(), [], 0
        for minis in plan:
            for mini in minis:
                micros = np.array_split(mini, self.accum)
                for micro_index in micros:
                    micro = [sequences[i] for i in micro_index]
                    if not micro:  # keep DeepSpeed's accumulation count whole
                        micro = [filler]
                        scale = 0.0
                    else:
                        scale = 1.0
                    loss, stats = self.micro_loss(micro)
                    self.engine.backward(loss * scale)
                    self.engine.step()
                    tokens += sum(len(s.ids) for s in micro)
                    if scale:
                        figures.append(stats)
        update_s = time.perf_counter() - tick
        merged = {k: fmean(f[k] for f in figures) for k in figures[0]} if figures else {}
        return (
            merged
            | drift
            | {
                "time_reference_s": reference_s,
                "time_update_s": update_s,
                "update_tokens_per_s": tokens / max(update_s, 1e-9),
                "sequences": float(len(sequences)),
            }
        )

    @staticmethod
    def _filler(data: StepData) -> TrainSequence:
        """A sequence for a rank with nothing to train on to run at zero weight."""
        episode = data.drawn_episodes[0]
        zeros = [[0.0] * len(episode.turns)]
        return next(s for s in to_sequences([episode], zeros) if any(s.mask))

    def _minis(self, sequences: list[TrainSequence], count: int) -> list[np.ndarray]:
        """One epoch's ``count`` mini-batches of sequence indices (some empty when this
        rank has fewer sequences than another): prompts in a shuffled order, the
        sequences of one prompt (a group) adjacent, so a micro-batch runs it once."""
        by_prompt: dict[tuple[int, ...], list[int]] = {}
        for i, seq in enumerate(sequences):
            by_prompt.setdefault(prefix_key(seq), []).append(i)
        groups = list(by_prompt.values())
        order = [i for group in self.rng.sample(groups, len(groups)) for i in group]
        return np.array_split(np.array(order, dtype=int), count)

    def micro_loss(self, micro: list[TrainSequence]) -> tuple[torch.Tensor, dict[str, float]]:
        batch = collate(micro, self.pad_id)
        width = batch["input_ids"].shape[1]

        def padded(name: str) -> torch.Tensor:
            rows = [getattr(s, name) for s in micro]
            return torch.tensor([r + [0.0] * (width - len(r)) for r in rows])

        with autocast(self.precision):  # log-probs come out float32: the head casts
            logp, entropy = shared_token_logprobs(
                self.engine, micro, self.pad_id, self.cfg.logprob_chunk,
                temperature=self.temperature,
            )  # fmt: skip
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
