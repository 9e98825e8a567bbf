"""From rollouts to training sequences: one sequence per segment (a context restart or a
window compaction starts a new one), each token with its rollout log-prob, loss mask and
advantage. A turn's sampled tokens form one contiguous run of mask 1, so the runs of an
episode's segments, in order, are its turns — the summary turn of a restart included.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from agentrl.harness.records import Episode
from agentrl.model.logprobs import decoder_hidden, head_logprobs, sequence_logprobs


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


def shared_prefix_len(seq: TrainSequence) -> int:
    """Length of the prompt a group's sequences share: every token before the one that
    predicts the first sampled token (that one must be in the suffix, where logits are)."""
    first = seq.mask.index(1) if 1 in seq.mask else len(seq.ids)
    return max(0, first - 1)


def prefix_key(seq: TrainSequence) -> tuple[int, ...]:
    return tuple(seq.ids[: shared_prefix_len(seq)])


def shared_token_logprobs(
    model: object,
    micro: list[TrainSequence],
    pad_id: int,
    chunk: int = 256,
    entropy: bool = True,
    temperature: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``sequence_logprobs`` of ``collate(micro)`` (at ``temperature``), with each distinct
    prompt run once.

    The G samples of a task share their first prompt (system, tools, task): its keys and
    values are computed once, with gradient, and expanded to every row that shares it;
    only the suffixes (the turns) run per row. Gradient reaches the prompt's computation
    through the expanded keys and values, so loss and gradients are those of the full
    forward pass, at a fraction of the tokens.
    """
    from transformers import DynamicCache

    from agentrl.model.generate import left_pad

    cut = [shared_prefix_len(s) for s in micro]
    groups: dict[tuple[int, ...], int] = {}
    row_group = [groups.setdefault(prefix_key(s), len(groups)) for s in micro]
    if len(groups) == len(micro) or not all(cut):
        batch = collate(micro, pad_id)
        return sequence_logprobs(
            model, batch["input_ids"], batch["attention_mask"], chunk, entropy=entropy,
            keep=batch["mask"] > 0, temperature=temperature,
        )  # fmt: skip
    prefix_ids, prefix_mask = left_pad([list(k) for k in groups], pad_id)
    cache = DynamicCache()
    decoder_hidden(
        model,
        input_ids=prefix_ids,
        attention_mask=prefix_mask,
        position_ids=(prefix_mask.cumsum(-1) - 1).clamp(min=0),
        cache=cache,
        use_cache=True,
    )
    index = torch.tensor(row_group)
    expanded = DynamicCache()
    for layer, kv in enumerate(cache.layers):
        expanded.update(kv.keys[index], kv.values[index], layer)
    suffixes = [s.ids[c:] for s, c in zip(micro, cut, strict=True)]
    length = max(map(len, suffixes))
    suffix_ids = torch.tensor([x + [pad_id] * (length - len(x)) for x in suffixes])
    suffix_mask = torch.tensor([[1] * len(x) + [0] * (length - len(x)) for x in suffixes])
    attention = torch.cat([prefix_mask[index], suffix_mask], 1)
    hidden = decoder_hidden(
        model,
        input_ids=suffix_ids,
        attention_mask=attention,
        position_ids=(attention.cumsum(-1) - 1).clamp(min=0)[:, prefix_ids.shape[1] :],
        cache=expanded,
        use_cache=True,
    )
    # the suffix's column t predicts its token t + 1: only the policy's tokens need the head
    keep = (
        torch.tensor(
            [
                s.mask[c + 1 : c + length] + [0] * (length - len(x))
                for s, c, x in zip(micro, cut, suffixes, strict=True)
            ]
        )
        > 0
    )
    taken, spread = head_logprobs(
        model, hidden[:, :-1], suffix_ids[:, 1:], chunk, entropy, keep, temperature
    )
    width = max(len(s.ids) for s in micro)

    def place(values: torch.Tensor) -> torch.Tensor:  # suffix columns -> collate's columns
        rows = []
        for r, (c, x) in enumerate(zip(cut, suffixes, strict=True)):
            body = values[r, : len(x) - 1]
            rows.append(
                torch.cat([values.new_zeros(c + 1), body, values.new_zeros(width - c - len(x))])
            )
        return torch.stack(rows)

    return place(taken), None if spread is None else place(spread)


def drift_from_start(sequences: list[TrainSequence]) -> dict[str, float]:
    """How far the rollout policy has moved from the start model on its own sampled tokens
    (the loss mask's): ``kl_to_start`` = mean(log pi - log pi_start), the k1 estimate of
    KL(pi || pi_start) under pi's samples, and ``logprob_change`` = mean |log pi - log
    pi_start|. Needs ``ref_logp`` (the start model's).

    >>> seq = TrainSequence([1, 2, 3], [0, 1, 1], [0.0, -0.5, -1.0], [0.0, 1.0, 1.0],
    ...                     ref_logp=[0.0, -0.7, -0.9])
    >>> {k: round(v, 3) for k, v in drift_from_start([seq]).items()}
    {'kl_to_start': 0.05, 'logprob_change': 0.15}
    """
    gaps = [
        now - start
        for s in sequences
        for now, start, kept in zip(s.rollout_logp, s.ref_logp, s.mask, strict=True)
        if kept
    ]
    if not gaps:
        return {}
    return {
        "kl_to_start": sum(gaps) / len(gaps),
        "logprob_change": sum(abs(g) for g in gaps) / len(gaps),
    }
