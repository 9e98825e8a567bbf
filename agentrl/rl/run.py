"""The rl stage: models/sft -> RL on data/synth/rl (whole episodes) and/or the pivot
states of data/pivots (one turn each), as ``rl.rollouts`` says -> models/rl.

Every rank trains (under ``torchrun`` or ``deepspeed``); rank 0 tracks the run in MLflow
and writes every output atomically: the model and tokenizer,
``metrics/rl.json`` (the last step's figures, means over the run) and ``plots/rl.tsv``
(every step, resumed runs included); wall-clock figures and the resume point go to
MLflow only.
"""

from __future__ import annotations

import os
from contextlib import nullcontext
from pathlib import Path
from statistics import fmean
from typing import Any

from agentrl.atomic import atomic_dir
from agentrl.chat import get_format
from agentrl.config import ConfigError, Params, digest, rl_world_rule
from agentrl.dataset import iter_records, split_dir
from agentrl.envs.registry import load_registry
from agentrl.errors import StageError
from agentrl.model.build import load_model_dir
from agentrl.model.lora import merged
from agentrl.outputs import write_metrics, write_plot
from agentrl.precision import stage_precision
from agentrl.rl.pivots import Pivot, fits
from agentrl.rl.profiling import pivot_records, read_anchors, read_pivots
from agentrl.rl.rollouts import SourceTally, source_figures
from agentrl.rl.sources import SOURCES, group_counts
from agentrl.rl.trainer import RLTrainer
from agentrl.tracking import content_digest, stage_run
from agentrl.train.loop import end_distributed

PLOT_COLUMNS = (
    "step", "reward_mean", "reward_std", "success", "grounded_success", "groups", "zero_variance_share",
    *(f"{source}_{figure}" for source in SOURCES for figure in source_figures(SourceTally())),
    "policy_loss", "entropy", "kl", "kl_to_start", "logprob_change", "clip_frac_low", "clip_frac_high", "is_weight_mean",
    "is_weight_max", "sequences", "update_skipped",
    "rollout_train_logp_gap", "response_tokens", "turns", "tool_calls", "tool_failure_rate",
    "compactions", "rollout_tokens_per_s", "update_tokens_per_s", "time_rollout_s",
    "time_reference_s", "time_update_s", "time_sync_s", "staleness", "time_overlap_s",
    "time_trainer_idle_s", "time_engine_idle_s",
)  # fmt: skip


def rl_stage(params: Params) -> dict[str, Any]:
    cfg, paths = params.rl, params.base.paths
    if problem := rl_world_rule(cfg, int(os.environ.get("WORLD_SIZE", "1"))):
        raise ConfigError(f"{params.file}: {problem}")
    precision = stage_precision(params.base.precision, params.file)
    print(f"rl: {precision} (base.precision {params.base.precision})")
    fmt = get_format(params.model.format)
    source = Path(paths.models) / "sft"
    data = split_dir(Path(paths.data) / "synth", "rl")
    records = list(iter_records(Path(paths.data) / "synth", "rl"))
    if not records:
        raise StageError(f"{data}: no rl tasks")
    pivots_dir = Path(paths.data) / "pivots"
    drawn = cfg.rollouts != "episodes"
    band = params.pivots.band
    tasks = pivot_records(params) if drawn else []
    pivots = read_pivots(pivots_dir, tasks, band) if drawn else []
    counts = group_counts(cfg.rollouts, cfg.tasks_per_step, cfg.pivot_share, cfg.anchor_share)
    anchors = read_anchors(pivots_dir, tasks, band) if "anchors" in counts else []
    model, tokenizer = load_model_dir(source, fmt)
    room, limit = params.harness.max_new_tokens, params.harness.context_limit
    pivots, anchors = (
        fitting_states(kind, states, pivots_dir, tokenizer, fmt, limit, room)
        for kind, states in (("pivot", pivots), ("anchor", anchors))
    )
    if pivots and len(pivots) < (draws := cfg.steps * counts["pivots"]):
        print(
            f"rl: {len(pivots)} pivots for at least {draws} pivot groups: the pool will be "
            "spent and return, and returned pivots mostly come out flat (raise pivots.tasks)"
        )
    sections = {
        "rl": params.section_dict("rl"),
        "harness": params.section_dict("harness"),
        "model.format": params.model.format,
        "precision": precision,
    } | ({"pivots.band": list(band)} if pivots else {})
    inputs = [content_digest(source), content_digest(data)]
    fingerprint = digest([sections, *inputs, *([content_digest(pivots_dir)] if pivots else [])])
    registry = load_registry(params.synth.envs, params.synth.heldout_tool_share, params.file)
    # under a launcher every rank trains; rank 0 alone tracks and writes
    rank = int(os.environ.get("RANK", "0"))
    upstream = {"model": source, "data": data} | ({"pivots": pivots_dir} if pivots else {})
    tracked = stage_run("rl", params.tracking, sections, upstream)
    with tracked if rank == 0 else nullcontext() as run:
        trainer = RLTrainer(
            cfg,
            params.harness,
            model,
            tokenizer,
            fmt,
            registry,
            params.base.seed + cfg.seed,
            fingerprint,
            precision,
            pivots,
            anchors,
            band,
        )
        steps, history, resumed = trainer.train(
            records,
            Path(paths.checkpoints) / "rl",
            lambda step, m: run.log_metrics(m, step=step) if rank == 0 else None,
        )
        trainer.harness.close()
        metrics = summary(steps, resumed, history, cfg.advantage, cfg.reward, precision)
        import deepspeed

        module = trainer.engine.module  # gathered from every rank under ZeRO-3
        with deepspeed.zero.GatheredParameters(list(module.parameters()), modifier_rank=None):
            if rank == 0:
                print(f"rl: {steps} steps, resumed from step {resumed}")
                run.log_dict(metrics, "rl_summary.json")
                with atomic_dir(Path(paths.models) / "rl") as tmp:
                    merged(module).save_pretrained(tmp)
                    tokenizer.save_pretrained(tmp)
                    run.record_output(tmp)
                write_metrics(Path(paths.metrics) / "rl.json", metrics)
                write_plot(Path(paths.plots) / "rl.tsv", history, PLOT_COLUMNS)
    end_distributed()
    return metrics


def fitting_states(
    kind: str, states: list[Pivot], path: Path, tokenizer: Any, fmt: Any, limit: int, room: int
) -> list[Pivot]:
    """The states whose history leaves ``room`` tokens in ``limit`` (a profile made at
    another ``harness.context_limit`` may hold longer ones)."""
    fitting = [p for p in states if fits(p, tokenizer, fmt, limit, room)]
    if len(fitting) < len(states):
        print(f"rl: {len(states) - len(fitting)} of {len(states)} {kind}s do not fit the context")
        if not fitting:
            raise StageError(f"{path}: no {kind} fits harness.context_limit {limit}")
    return fitting


def summary(
    steps: int,
    resumed: int,
    history: list[dict[str, float]],
    advantage: str,
    reward: str,
    precision: str,
) -> dict[str, Any]:
    """metrics/rl.json: the last step's figures and means over the run."""
    means = ("reward_mean", "success", "grounded_success", "time_rollout_s", "time_update_s")
    return {
        "steps": steps,
        "resumed_from": resumed,
        "advantage": advantage,
        "reward": reward,
        "precision": precision,
        "last": {k: round(v, 4) for k, v in history[-1].items() if k != "step"},
        "mean": {
            k: round(fmean(h[k] for h in history if k in h), 4)
            for k in means
            if any(k in h for h in history)
        },
    }
