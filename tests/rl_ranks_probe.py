"""Launched by tests/test_rl.py under torchrun: the real rl stage on every rank, watched by
a probe that records which tasks the rank rolls out, how many episodes each update
trains on, and a digest of its weights after every sync (the start and each update),
written to ``<dir>/rank<r>.json``.

    torchrun --nproc_per_node 2 tests/rl_ranks_probe.py params.yaml probe/
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any

from agentrl.config import load_params
from agentrl.rl.rollouts import EpisodeRollouts, StepData
from agentrl.rl.run import rl_stage
from agentrl.rl.trainer import RLTrainer
from agentrl.stage import run_stage

seen: dict[str, list[Any]] = {"tasks": [], "weights": [], "trained": []}
draw_tasks, sync_weights, update = EpisodeRollouts._tasks, RLTrainer.sync_weights, RLTrainer.update


def probed_tasks(self: EpisodeRollouts, records: list[dict[str, Any]], n: int) -> list[dict]:
    tasks = draw_tasks(self, records, n)
    seen["tasks"].append([t["id"] for t in tasks])
    return tasks


def probed_sync(self: RLTrainer, ckpt: Path) -> None:
    sync_weights(self, ckpt)
    digest = hashlib.sha256()
    for name, value in self.engine.module.state_dict().items():
        digest.update(name.encode() + value.detach().float().numpy().tobytes())
    seen["weights"].append(digest.hexdigest())


def probed_update(self: RLTrainer, data: StepData) -> dict[str, float]:
    seen["trained"].append(len(data.episodes))
    return update(self, data)


def main() -> None:
    params_file, out = sys.argv[1], Path(sys.argv[2])
    EpisodeRollouts._tasks = probed_tasks
    RLTrainer.sync_weights = probed_sync
    RLTrainer.update = probed_update
    rl_stage(load_params(params_file))
    out.mkdir(parents=True, exist_ok=True)
    (out / f"rank{os.environ['RANK']}.json").write_text(json.dumps(seen))


if __name__ == "__main__":
    run_stage(main)
