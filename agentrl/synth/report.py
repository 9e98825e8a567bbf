"""Synthesis statistics for DVC metrics and MLflow, and sample records as artifacts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agentrl.config import SPLITS
from agentrl.dataset import split_dir


def summarize(stats: dict[str, Any]) -> dict[str, Any]:
    """``dvc``: nested metrics for metrics/synth.json, without timings so that the file is
    as reproducible as the data; ``flat``: numeric MLflow metrics, timings included."""
    splits: dict[str, Any] = {}
    for split, st in stats.items():
        attempts = max(1, st["attempts"])
        splits[split] = {
            "samples": st["n"],
            "attempts": st["attempts"],
            "acceptance_rate": round(
                (st["attempts"] - sum(st["rejections"].values())) / attempts, 4
            )
            if st["attempts"]
            else 1.0,
            "tokens_est": st["tokens"],
            "recoveries": st["recoveries"],
            "seconds": st["seconds"],
            "samples_per_second": round(st["n"] / st["seconds"], 1) if st["seconds"] else 0.0,
            "families": dict(sorted(st["families"].items())),
            "rejections": {r: st["rejections"].get(r, 0) for r in sorted(st["rejections"])},
            "rejection_rate": {
                r: round(c / attempts, 4) for r, c in sorted(st["rejections"].items())
            },
            "turns_hist": {str(k): v for k, v in sorted(st["turns"].items())},
            "depth_hist": {str(k): v for k, v in sorted(st["depth"].items())},
        }
    seconds = sum(s["seconds"] for s in splits.values())
    total = {
        "samples": sum(s["samples"] for s in splits.values()),
        "tokens_est": sum(s["tokens_est"] for s in splits.values()),
        "seconds": round(seconds, 3),
    }
    total["samples_per_second"] = round(total["samples"] / seconds, 1) if seconds else 0.0
    flat = {f"total.{k}": v for k, v in total.items()}
    for split, s in splits.items():
        for key in (
            "samples",
            "attempts",
            "acceptance_rate",
            "tokens_est",
            "recoveries",
            "samples_per_second",
        ):
            flat[f"{split}.{key}"] = s[key]
        for reason, count in s["rejections"].items():
            flat[f"{split}.rejected.{reason}"] = count
    timing = ("seconds", "samples_per_second")
    dvc_splits = {k: {m: v for m, v in s.items() if m not in timing} for k, s in splits.items()}
    dvc_total = {m: v for m, v in total.items() if m not in timing}
    return {"dvc": {"total": dvc_total, "splits": dvc_splits}, "flat": flat, "splits": splits}


def write_samples(run: Any, root: Path, n: int) -> None:
    """Log the first ``n`` records of every split as ``samples/<split>.json``."""
    if n == 0:
        return
    for split in SPLITS:
        directory = split_dir(root, split)
        shards = sorted(directory.glob("shard-*.jsonl"))
        if not shards:
            continue
        with shards[0].open(encoding="utf-8") as fh:
            records = [json.loads(line) for line, _ in zip(fh, range(n), strict=False)]
        run.log_dict(records, f"samples/{split}.json")
