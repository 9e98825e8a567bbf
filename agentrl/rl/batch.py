"""From rollouts to training sequences: one sequence per segment (a context restart or a
window compaction starts a new one), each token with its rollout log-prob, loss mask and
advantage. A turn's sampled tokens form one contiguous run of mask 1, so the runs of an
episode's segments, in order, are its turns — the summary turn of a restart included.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from agentrl.harness.records import Episode


@dataclass
class TrainSequence:
    ids: list[int]
    mask: list[int]
    rollout_logp: list[float]
    advantages: list[float]
    old_logp: list[float] | None = None  # the trainer's, before the update (None: not yet)
    ref_logp: list[float] = field(default_factory=list)  # the frozen reference's (KL)


def to_sequences(episodes: list[Episode], per_turn: list[list[float]]) -> list[TrainSequence]:
    """Sequences of every segment of ``episodes``; ``per_turn[e][t]`` is turn t's advantage."""
    out = []
    for episode, advantages in zip(episodes, per_turn, strict=True):
        turn = 0
        for segment in episode.segments:
            values = [0.0] * len(segment.ids)
            i = 0
            while i < len(values):
                if not segment.loss_mask[i]:
                    i += 1
                    continue
                j = i
                while j < len(values) and segment.loss_mask[j]:
                    j += 1
                values[i:j] = [advantages[turn]] * (j - i)
                turn, i = turn + 1, j
            out.append(TrainSequence(segment.ids, segment.loss_mask, segment.logprobs, values))
        if turn != len(episode.turns):
            raise ValueError(
                f"episode {episode.task_id}/{episode.sample}: {turn} sampled runs for "
                f"{len(episode.turns)} turns"
            )
    return out


def collate(batch: list[TrainSequence], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-padded tensors; position t of ``mask``/``rollout_logp``/``advantages`` is
    about the token at t, predicted from t - 1."""
    width = max(len(s.ids) for s in batch)

    def pad(rows: list[list], value: float, dtype: torch.dtype) -> torch.Tensor:
        return torch.tensor([r + [value] * (width - len(r)) for r in rows], dtype=dtype)

    return {
        "input_ids": pad([s.ids for s in batch], pad_id, torch.long),
        "attention_mask": pad([[1] * len(s.ids) for s in batch], 0, torch.long),
        "mask": pad([s.mask for s in batch], 0, torch.float32),
        "rollout_logp": pad([s.rollout_logp for s in batch], 0.0, torch.float32),
        "advantages": pad([s.advantages for s in batch], 0.0, torch.float32),
    }


def token_logprobs(
    model: object, batch: dict[str, torch.Tensor]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probs of each token under ``model`` (position 0 gets 0) and per-token entropy."""
    logits = (
        model(  # type: ignore[operator]
            input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]
        )
        .logits[:, :-1]
        .float()
    )
    logp_all = torch.log_softmax(logits, dim=-1)
    taken = logp_all.gather(-1, batch["input_ids"][:, 1:, None])[..., 0]
    with torch.no_grad():  # a figure, never a loss term: no graph over the full vocabulary
        entropy = -(logp_all.exp() * logp_all).sum(-1)
    zero = torch.zeros_like(taken[:, :1])
    return torch.cat([zero, taken], 1), torch.cat([zero, entropy], 1)
