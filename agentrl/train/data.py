"""Render records to token ids and loss masks, then pack them into fixed-length rows.

Packing keeps documents apart: position ids restart at every document and each row
carries document ids, from which the batch builds a block-diagonal causal mask (no token
attends across documents) and drops the label of every document's first token (no token
is trained to predict the next document).
"""

from __future__ import annotations

import bisect
import hashlib
import random
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import torch

from agentrl.chat import ChatFormat
from agentrl.chat.render import render_ids_batch


@dataclass
class Example:
    ids: list[int]
    loss_mask: list[int]  # 1 where the token is a training target


@dataclass
class Row:
    ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    positions: list[int] = field(default_factory=list)
    docs: list[int] = field(default_factory=list)


@dataclass
class DataStats:
    records: int = 0
    dropped_overlong: int = 0
    truncated: int = 0
    split: int = 0  # documents longer than the context, trained as consecutive pieces
    no_targets: int = 0
    tokens: int = 0
    target_tokens: int = 0


def is_heldout(record_id: str, fraction: float) -> bool:
    """Stable held-out membership by id, so resume and reruns see the same split."""
    return int(hashlib.sha256(record_id.encode()).hexdigest()[:8], 16) / 2**32 < fraction


def build_examples(
    records: Iterable[dict[str, Any]],
    tokenizer: Any,
    fmt: ChatFormat,
    loss_on: str,
    context: int,
    overlong: str,
) -> tuple[list[Example], DataStats]:
    stats = DataStats()
    examples = []
    records = list(records)
    rendered = []
    for start in range(0, len(records), 1024):
        chunk = records[start : start + 1024]
        # a restart-practice sample trains as its contexts (before and after the restart)
        rendered += render_ids_batch(
            tokenizer,
            fmt,
            [(c, r["tools"] or None) for r in chunk for c in r.get("contexts") or [r["messages"]]],
        )
    for ids, mask in rendered:
        stats.records += 1
        if loss_on == "all":
            mask = [1] * len(ids)
        pieces = [(ids, mask)]
        if len(ids) > context:
            if overlong == "drop":
                stats.dropped_overlong += 1
                continue
            if overlong == "truncate":
                stats.truncated += 1
                pieces = [(ids[:context], mask[:context])]
            else:
                stats.split += 1
                pieces = [
                    (ids[i : i + context], mask[i : i + context])
                    for i in range(0, len(ids), context)
                ]
        for piece_ids, piece_mask in pieces:
            if sum(piece_mask[1:]) == 0:
                stats.no_targets += 1
                continue
            stats.tokens += len(piece_ids)
            stats.target_tokens += sum(piece_mask[1:])
            examples.append(Example(piece_ids, piece_mask))
    return examples, stats


def pack(examples: list[Example], context: int, seed: int, packing: bool) -> list[Row]:
    """Rows of at most ``context`` tokens by best fit decreasing: longest documents first,
    each into the open row it fills best. Rows are shuffled when batched, so this order
    costs nothing in training and keeps padding to a few percent."""
    order = list(range(len(examples)))
    random.Random(seed).shuffle(order)
    order.sort(key=lambda i: -len(examples[i].ids))
    rows: list[Row] = []
    free: list[tuple[int, int]] = []  # (room left, row index), sorted
    for index in order:
        example = examples[index]
        size = len(example.ids)
        slot = bisect.bisect_left(free, (size, -1)) if packing else len(free)
        if slot < len(free):
            room, at = free.pop(slot)
        else:
            room, at = context, len(rows)
            rows.append(Row())
        row = rows[at]
        doc = row.docs[-1] + 1 if row.docs else 0
        row.ids += example.ids
        row.loss_mask += [
            0,
            *example.loss_mask[1:],
        ]  # a document's first token has no in-document context
        row.positions += list(range(size))
        row.docs += [doc] * size
        if packing and room - size > 0:
            bisect.insort(free, (room - size, at))
    return rows


def collate(rows: list[Row], context: int, pad_id: int) -> dict[str, torch.Tensor]:
    """Tensors for one micro-batch, padded to ``context``; padding forms its own document."""
    batch = len(rows)
    ids = torch.full((batch, context), pad_id, dtype=torch.long)
    labels = torch.full((batch, context), -100, dtype=torch.long)
    positions = torch.zeros((batch, context), dtype=torch.long)
    docs = torch.full((batch, context), -1, dtype=torch.long)
    for b, row in enumerate(rows):
        n = len(row.ids)
        ids[b, :n] = torch.tensor(row.ids)
        target = torch.tensor(row.ids)
        target[torch.tensor(row.loss_mask) == 0] = -100
        labels[b, :n] = target
        positions[b, :n] = torch.tensor(row.positions)
        positions[b, n:] = torch.arange(context - n)
        docs[b, :n] = torch.tensor(row.docs)
        docs[b, n:] = (row.docs[-1] + 1) if row.docs else 0
    causal = torch.tril(torch.ones(context, context, dtype=torch.bool))
    mask = (docs[:, :, None] == docs[:, None, :]) & causal
    return {
        "input_ids": ids,
        "labels": labels,
        "position_ids": positions,
        "attention_mask": mask[:, None],
        "pad_tokens": torch.tensor(sum(context - len(r.ids) for r in rows)),
    }
