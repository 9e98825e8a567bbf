"""What a DVC-tracked metrics or plot file may hold, and writing it atomically.

DVC hashes these files into ``dvc.lock``, so they hold only figures that are a function
of the stage's inputs: wall-clock figures (seconds, tokens per second, the step a run
resumed from) depend on the machine, its load and the run's history, and go to MLflow
only. Equal inputs then give equal bytes (tests/test_bitwise.py).
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

from agentrl.atomic import write_json_atomic, write_text_atomic

WALL_CLOCK_SUFFIXES = ("_s", "_seconds", "seconds", "per_second")
WALL_CLOCK_KEYS = frozenset({"resumed_from"})


def is_wall_clock(key: str) -> bool:
    """Whether a metric name is a wall-clock figure.

    >>> [is_wall_clock(k) for k in ("tokens_per_s", "train_s", "resumed_from", "loss")]
    [True, True, True, False]
    """
    return key in WALL_CLOCK_KEYS or key.endswith(WALL_CLOCK_SUFFIXES)


def without_wall_clock(data: Any) -> Any:
    """``data`` with every wall-clock key dropped at any depth: what a DVC output may hold.

    >>> without_wall_clock({"loss": 0.5, "time": {"update_s": 3.0}, "rows": [{"step_s": 1}]})
    {'loss': 0.5, 'time': {}, 'rows': [{}]}
    """
    if isinstance(data, dict):
        return {k: without_wall_clock(v) for k, v in data.items() if not is_wall_clock(str(k))}
    if isinstance(data, list):
        return [without_wall_clock(v) for v in data]
    return data


def write_metrics(path: Path, metrics: dict[str, Any]) -> None:
    """A DVC metrics file: ``metrics`` without wall-clock figures, written atomically."""
    write_json_atomic(path, without_wall_clock(metrics))


def write_plot(path: Path, history: list[dict[str, Any]], columns: tuple[str, ...]) -> None:
    """A DVC plot file: one tab-separated row per logged step, written atomically, without
    wall-clock columns (they are in MLflow), so equal inputs give equal bytes. A row
    with a key ``columns`` does not name is an error (never a silently dropped figure); a
    row without one leaves it blank."""
    unknown = sorted({key for row in history for key in row} - set(columns))
    if unknown:
        raise ValueError(f"{path}: rows carry columns the plot does not name: {unknown}")
    kept = [c for c in columns if not is_wall_clock(c)]
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, kept, delimiter="\t", extrasaction="ignore", restval="")
    writer.writeheader()
    writer.writerows(history)
    write_text_atomic(path, buffer.getvalue())
