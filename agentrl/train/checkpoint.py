"""Resumable DeepSpeed checkpoints shared by every trainer: the engine's model and
optimizer state plus a client dict (step, history, RNG states, ...), under a fingerprint
of the params and inputs that made them. A checkpoint made with other params or inputs
is deleted rather than continued; only the latest step is kept."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

META = "agentrl_meta.json"


def load(engine: Any, ckpt: Path, fingerprint: str, rank: int) -> dict[str, Any] | None:
    """The client state of the checkpoint in ``ckpt`` loaded into ``engine``, or None."""
    meta = ckpt / META
    if not meta.is_file() or json.loads(meta.read_text()).get("fingerprint") != fingerprint:
        if rank == 0 and ckpt.exists():
            shutil.rmtree(ckpt)  # made with other params or inputs: not ours to continue
        return None
    _, client = engine.load_checkpoint(str(ckpt))
    return client


def save(
    engine: Any, ckpt: Path, step: int, fingerprint: str, rank: int, client: dict[str, Any]
) -> None:
    engine.save_checkpoint(str(ckpt), tag=f"step{step}", client_state=client)
    if rank == 0:
        (ckpt / META).write_text(json.dumps({"fingerprint": fingerprint, "step": step}))
        for old in ckpt.glob("step*"):
            if old.name != f"step{step}":
                shutil.rmtree(old, ignore_errors=True)
