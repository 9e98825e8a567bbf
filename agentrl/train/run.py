"""A complete LM training stage (midtrain or sft): data -> DeepSpeed loop -> saved model.

Rank 0 writes every output atomically: the model and tokenizer with save_pretrained,
``metrics/<stage>.json`` and ``plots/<stage>.tsv`` (the whole history, resumed runs
included), all without wall-clock figures, which go to MLflow only.
"""

from __future__ import annotations

import os
from contextlib import nullcontext
from dataclasses import asdict
from pathlib import Path
from statistics import fmean
from typing import Any

from agentrl.atomic import atomic_dir
from agentrl.chat import get_format
from agentrl.config import ConfigError, Params, digest
from agentrl.dataset import iter_records, split_dir
from agentrl.errors import StageError
from agentrl.model.build import load_model_dir
from agentrl.model.lora import apply_lora, format_token_ids, merged
from agentrl.outputs import write_metrics, write_plot
from agentrl.precision import stage_precision
from agentrl.tracking import content_digest, stage_run
from agentrl.train.data import build_examples, is_heldout, pack
from agentrl.train.loop import Trainer, end_distributed

PLOT_COLUMNS = (
    "step",
    "loss",
    "eval_loss",
    "lr",
    "grad_norm",
    "tokens_per_s",
    "padding_share",
    "step_time_s",
)


def training_rows(
    stage: str, params: Params, split: str, tokenizer: Any, params_file: str
) -> tuple[list[Any], list[Any], Any]:
    """(packed training rows, packed held-out rows, data statistics) of ``split`` under
    ``params.<stage>``: records filtered, held out by id, rendered, masked and packed."""
    cfg = getattr(params, stage)
    fmt = get_format(params.model.format)
    synth = Path(params.base.paths.data) / "synth"
    records = list(iter_records(synth, split, cfg.max_samples))
    if cfg.families is not None:
        records = [r for r in records if r["family"] in cfg.families]
        if not records:
            raise ConfigError(
                f"{params_file}: {stage}.families: no record of {cfg.families} in "
                f"{split_dir(synth, split)}"
            )
    held = [is_heldout(r["id"], cfg.eval_fraction) for r in records]
    train_examples, stats = build_examples(
        [r for r, h in zip(records, held, strict=True) if not h],
        tokenizer, fmt, cfg.loss_on, cfg.context, cfg.overlong,
    )  # fmt: skip
    eval_examples, _ = build_examples(
        [r for r, h in zip(records, held, strict=True) if h],
        tokenizer, fmt, cfg.loss_on, cfg.context, cfg.overlong,
    )  # fmt: skip
    if not train_examples:
        raise StageError(f"{split_dir(synth, split)}: no usable training example ({asdict(stats)})")
    if stats.dropped_overlong or stats.truncated or stats.split:
        print(
            f"{stage}: {stats.dropped_overlong + stats.truncated + stats.split} of "
            f"{stats.records} samples longer than {cfg.context} tokens: "
            f"{stats.dropped_overlong} dropped ({dropped_share(stats):.1%}), "
            f"{stats.truncated} truncated, {stats.split} split into pieces"
        )
    rows = pack(train_examples, cfg.context, params.base.seed, cfg.packing)
    eval_rows = pack(eval_examples, cfg.context, params.base.seed, cfg.packing)[:64]
    return rows, eval_rows, stats


def summary(result: Any, rows: int, stats: Any) -> dict[str, Any]:
    """The run's figures: the last step's losses and means over the history (wall-clock
    ones included; outputs.write_metrics drops those from the DVC file)."""
    last, history = result.history[-1], result.history
    return {
        "steps": result.step,
        "resumed_from": result.resumed_from,
        "loss": round(last["loss"], 4),
        "eval_loss": round(last.get("eval_loss", float("nan")), 4),
        "tokens_per_s": round(fmean(h["tokens_per_s"] for h in history), 1),
        "padding_share": round(fmean(h["padding_share"] for h in history), 4),
        "train_s": round(result.seconds, 1),
        "rows": rows,
        "data": asdict(stats) | {"dropped_share": round(dropped_share(stats), 4)},
    }


def dropped_share(stats: Any) -> float:
    """The share of the split's samples the stage did not train on for their length."""
    return stats.dropped_overlong / max(1, stats.records)


def train_stage(
    stage: str,
    params: Params,
    source: Path,
    split: str,
    after: Any = None,
    params_file: str = "params.yaml",
) -> dict[str, Any]:
    """Train ``stage`` from the model in ``source`` on data split ``split``.

    ``after(model, tokenizer, run)`` may add metrics (sft's format check) before saving.
    """
    cfg = getattr(params, stage)
    fmt = get_format(params.model.format)
    paths = params.base.paths
    data = split_dir(Path(paths.data) / "synth", split)
    out = Path(paths.models) / stage
    ckpt = Path(paths.checkpoints) / stage
    precision = stage_precision(params.base.precision, params_file)
    print(f"{stage}: {precision} (base.precision {params.base.precision})")
    model, tokenizer = load_model_dir(source, fmt)
    if cfg.context > model.config.max_position_embeddings:
        raise ConfigError(
            f"{params_file}: {stage}.context: {cfg.context} exceeds the {model.config.max_position_embeddings} "
            f"positions of {source}"
        )
    rows, eval_rows, stats = training_rows(stage, params, split, tokenizer, params_file)
    sections = {
        stage: params.section_dict(stage),
        "model.format": params.model.format,
        "precision": precision,
    }
    fingerprint = digest([sections, content_digest(source), content_digest(data)])
    # under a launcher only rank 0 tracks and writes
    rank = int(os.environ.get("RANK", "0"))
    tracked = stage_run(stage, params.tracking, sections, {"model": source, "data": data})
    model = apply_lora(
        model, cfg.lora, f"{params_file}: {stage}.lora", format_token_ids(tokenizer, fmt)
    )
    with tracked if rank == 0 else nullcontext() as run:
        trainer = Trainer(
            cfg, model, tokenizer.pad_token_id, params.base.seed, fingerprint, precision
        )
        result = trainer.train(
            rows,
            eval_rows,
            ckpt,
            lambda step, m: run.log_metrics(m, step=step) if trainer.rank == 0 else None,
        )
        metrics: dict[str, Any] = {}
        if trainer.rank == 0:
            print(f"{stage}: {result.step} steps, resumed from step {result.resumed_from}")
            metrics = summary(result, len(rows), stats) | {"precision": precision}
            model = merged(trainer.unwrapped())
            if after is not None:
                metrics |= after(model, tokenizer, run)
            run.log_metrics({k: v for k, v in metrics.items() if isinstance(v, int | float)})
            run.log_dict(metrics, f"{stage}_summary.json")
            with atomic_dir(out) as tmp:
                model.save_pretrained(tmp)
                tokenizer.save_pretrained(tmp)
                run.record_output(tmp)
            write_metrics(Path(paths.metrics) / f"{stage}.json", metrics)
            write_plot(Path(paths.plots) / f"{stage}.tsv", result.history, PLOT_COLUMNS)
    end_distributed()
    return metrics
