"""Reading the synthesized splits: where each split lives and its records, in order."""

from __future__ import annotations

import json
from collections.abc import Iterator
from itertools import islice
from pathlib import Path
from typing import Any

from agentrl.config import EVAL_SPLITS
from agentrl.errors import StageError


def expert_trajectory(record: dict[str, Any]) -> list[dict[str, Any]] | None:
    """A record's expert trajectory: rl keeps it apart from the prompt its episodes start
    from (``expert``), the other splits in ``messages``; None when it has the prompt only.

    >>> expert_trajectory({"messages": [{"role": "user"}], "expert": [{"role": "user"}, {}]})
    [{'role': 'user'}, {}]
    >>> expert_trajectory({"messages": [{"role": "user"}]}) is None
    True
    """
    messages = record.get("expert") or record["messages"]
    return messages if len(messages) > 1 else None


def split_dir(root: Path, split: str) -> Path:
    return root / "eval" / split if split in EVAL_SPLITS else root / split


def iter_records(root: Path, split: str, limit: int | None = None) -> Iterator[dict[str, Any]]:
    """Records of a split in shard order; an absent or empty split is a StageError."""
    shards = sorted(split_dir(root, split).glob("shard-*.jsonl"))
    if not shards:
        raise StageError(f"{split_dir(root, split)}: no shards (run the synth stage first)")

    def lines() -> Iterator[dict[str, Any]]:
        for shard in shards:
            with shard.open(encoding="utf-8") as fh:
                for number, line in enumerate(fh, 1):
                    try:
                        yield json.loads(line)
                    except json.JSONDecodeError as err:
                        raise StageError(f"{shard}:{number}: corrupt record: {err}") from err

    found = False
    for record in islice(lines(), limit):
        found = True
        yield record
    if not found:
        raise StageError(f"{split_dir(root, split)}: the split is empty")
