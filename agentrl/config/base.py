"""The ground every params section stands on: the strict base model, the split names,
the error a bad key raises, and the helpers sections share."""

from __future__ import annotations

import hashlib
import importlib
import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

DEFAULT_PARAMS = Path("params.yaml")

# Families built into agentrl; plugins add theirs through ``synth.envs``.
BUILTIN_FAMILIES = ("calculator", "knowledge_base", "doc_search", "store", "convert", "compose")
SPLITS = ("midtrain", "sft", "rl", "test", "heldout_tools", "heldout_compose", "long_horizon")
TRAIN_SPLITS = ("midtrain", "sft", "rl")
EVAL_SPLITS = ("test", "heldout_tools", "heldout_compose", "long_horizon")
TRACE_SPLITS = ("midtrain", "sft")  # splits whose trajectories a teacher writes


class ConfigError(Exception):
    """Bad parameters: the message names the file, the dotted key and the problem."""


def import_plugin(path: str) -> Any:
    """The object a 'module:Class' path names; ValueError (naming the path) if it has none."""
    module_name, _, attr = path.partition(":")
    if not module_name or not attr:
        raise ValueError(f"'{path}' is not a 'module:Class' path")
    try:
        return getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as err:
        raise ValueError(f"cannot import '{path}': {err}") from err


class Strict(BaseModel):
    """Base of every params section: frozen, unknown keys forbidden, no type coercion."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class Paths(Strict):
    """Where stages read and write, relative to the repository root."""

    data: str = Field("data", description="Synthesised datasets (DVC-tracked).")
    models: str = Field("models", description="Saved models, one directory per stage.")
    metrics: str = Field("metrics", description="DVC metrics files (no wall-clock figures).")
    plots: str = Field("plots", description="DVC plot files (TSV, one row per step or cell).")
    reports: str = Field("reports", description="report.md, figures and sample trajectories.")
    checkpoints: str = Field(
        "checkpoints",
        description="Resumable training state (not a DVC output: a stage resumes from it "
        "only when its params and inputs are unchanged).",
    )


class BaseSection(Strict):
    """Settings every stage shares."""

    seed: int = Field(0, description="Root seed; every random draw of every stage derives from it.")
    precision: Literal["auto", "fp32", "bf16"] = Field(
        "auto",
        description="Arithmetic of every stage that runs the model (midtrain, sft, rl, eval). "
        "bf16: training autocasts its forward to bfloat16 over float32 master weights and "
        "optimizer state (log-probs, losses and ratios stay float32; on a GPU DeepSpeed's bf16 "
        "mode), generation runs bf16 weights. auto: bf16 where the hardware has it natively (a "
        "CPU with avx512_bf16 or amx_bf16, a GPU with bf16), else fp32; a forced bf16 without "
        "it is an error (emulated bf16 is slower than fp32). The resolved value is logged as "
        "the MLflow param `precision`.",
    )
    paths: Paths = Paths()


class TrackingSection(Strict):
    """MLflow: where stage runs, their metrics and lineage go (no stage depends on it)."""

    experiment: str = Field("agentrl", min_length=1, description="MLflow experiment name.")
    uri: str | None = Field(
        None,
        description="MLflow tracking URI. None: $MLFLOW_TRACKING_URI, else sqlite:///mlflow.db "
        "at the repository root.",
    )
    log_samples: int = Field(8, ge=0, description="Samples per split logged as an artifact.")


def dotted(loc: tuple[Any, ...]) -> str:
    return ".".join(str(part) for part in loc) or "<root>"


def digest(obj: Any) -> str:
    """Stable short digest of JSON-able data (params sections, specs)."""
    blob = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]
