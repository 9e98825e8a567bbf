"""The DeepSpeed training loop shared by midtrain and sft.

Runs as one process on CPU without a launcher (torch.distributed on gloo is set up here)
or under `deepspeed`/`torchrun` with several processes (each rank takes every world-th
micro-batch). Resumable: checkpoints hold model, optimizer, scheduler, RNG, step and the
metric history; the data position is a pure function of the step, so resume needs no
loader state. A checkpoint made with other params or another input model is ignored.
"""

from __future__ import annotations

import math
import os
import random
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from agentrl.config import TrainSection
from agentrl.model.logprobs import decoder_hidden, head_logprobs
from agentrl.precision import Resolved, autocast
from agentrl.train import checkpoint
from agentrl.train.data import Row, collate


def setup_distributed() -> tuple[int, int]:
    """(rank, world size); a lone process gets a gloo group of one on a free port."""
    import deepspeed
    import torch.distributed as dist

    if not dist.is_initialized():
        if "RANK" not in os.environ:
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            os.environ.update(
                MASTER_ADDR="127.0.0.1",
                MASTER_PORT=str(port),
                RANK="0",
                WORLD_SIZE="1",
                LOCAL_RANK="0",
            )
        deepspeed.init_distributed(
            dist_backend="nccl" if torch.cuda.is_available() else "gloo", verbose=False
        )
    return dist.get_rank(), dist.get_world_size()


def end_distributed() -> None:
    """Every rank waits for rank 0's writes, then the group is torn down in order: a rank
    that exits while the group lives can abort in its teardown ("terminate called without
    an active exception": a 2-process CPU run under load, once)."""
    import torch.distributed as dist

    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def ds_config(
    micro_batch: int,
    grad_accum: int,
    grad_clip: float,
    zero_stage: int,
    world: int,
    precision: Resolved,
    offload_optimizer: bool = False,
) -> dict[str, Any]:
    """The DeepSpeed config every trainer here uses. bf16 on a GPU is DeepSpeed's own
    mode (bf16 weights, float32 masters in the optimizer); on a CPU the weights stay
    float32 and the trainer autocasts its forward (``agentrl.precision``)."""
    zero: dict[str, Any] = {"stage": zero_stage}
    if offload_optimizer and zero_stage >= 1:
        zero["offload_optimizer"] = {"device": "cpu"}
    return {
        "train_micro_batch_size_per_gpu": micro_batch,
        "gradient_accumulation_steps": grad_accum,
        "train_batch_size": micro_batch * grad_accum * world,
        "gradient_clipping": grad_clip,
        "zero_optimization": zero,
        "bf16": {"enabled": precision == "bf16" and torch.cuda.is_available()},
        "zero_allow_untested_optimizer": True,
        "steps_per_print": 10**9,
        "wall_clock_breakdown": False,
    }


def skip_lone_allreduce(engine: Any, world: int, zero_stage: int) -> None:
    """A lone ZeRO-0 process has nothing to reduce, yet DeepSpeed flattens, all-reduces
    and copies back every gradient after each backward (0.3-0.5 s a step on the 135M
    model, 2 CPU cores): turn that off. ZeRO 1-3 move gradients into their partitions in
    the same call, so they keep it."""
    if world == 1 and zero_stage == 0:
        engine.enable_backward_allreduce = False


def cosine_with_warmup(cfg: TrainSection) -> Callable[[int], float]:
    def factor(step: int) -> float:
        if step < cfg.warmup_steps:
            return (step + 1) / cfg.warmup_steps
        progress = (step - cfg.warmup_steps) / max(1, cfg.max_steps - cfg.warmup_steps)
        return cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (
            1 + math.cos(math.pi * min(1.0, progress))
        )

    return factor


def lm_loss(model: Any, batch: dict[str, torch.Tensor], chunk: int) -> tuple[torch.Tensor, int]:
    """Mean next-token loss over target tokens, and their count (log-probs ``chunk``
    positions at a time: no full-vocabulary logits for the whole row)."""
    hidden = decoder_hidden(
        model,
        input_ids=batch["input_ids"],
        attention_mask=batch["attention_mask"],
        position_ids=batch["position_ids"],
    )
    labels = batch["labels"][:, 1:]
    target = labels != -100
    taken, _ = head_logprobs(model, hidden[:, :-1], labels, chunk, entropy=False, keep=target)
    count = int(target.sum())
    return -(taken * target).sum() / max(1, count), count


@dataclass
class TrainResult:
    step: int
    history: list[dict[str, float]] = field(default_factory=list)
    resumed_from: int = 0
    seconds: float = 0.0


class Trainer:
    def __init__(
        self,
        cfg: TrainSection,
        model: Any,
        pad_id: int,
        seed: int,
        fingerprint: str,
        precision: Resolved,
    ):
        import deepspeed

        self.cfg = cfg
        self.precision = precision
        self.rank, self.world = setup_distributed()
        self.pad_id = pad_id
        self.seed = seed
        self.fingerprint = fingerprint
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        weights = [p for p in model.parameters() if p.requires_grad]  # LoRA: adapters only
        decay = [p for p in weights if p.ndim >= 2]
        no_decay = [p for p in weights if p.ndim < 2]
        groups = [
            {"params": decay, "weight_decay": cfg.weight_decay},
            {"params": no_decay, "weight_decay": 0.0},
        ]
        optimizer = torch.optim.AdamW(
            [g for g in groups if g["params"]], lr=cfg.lr, betas=cfg.betas
        )
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, cosine_with_warmup(cfg))
        self.engine, self.optimizer, _, self.scheduler = deepspeed.initialize(
            model=model,
            optimizer=optimizer,
            lr_scheduler=scheduler,
            config=ds_config(
                cfg.micro_batch_size,
                cfg.grad_accum,
                cfg.grad_clip,
                cfg.zero_stage,
                self.world,
                precision,
                cfg.offload_optimizer,
            ),
        )
        skip_lone_allreduce(self.engine, self.world, cfg.zero_stage)

    def micro_batch(self, rows: list[Row], index: int) -> dict[str, torch.Tensor]:
        """The ``index``-th micro-batch of this rank: epochs reshuffle rows deterministically."""
        per_epoch = max(1, len(rows) // self.cfg.micro_batch_size)
        global_index = index * self.world + self.rank
        epoch, offset = divmod(global_index, per_epoch)
        order = np.random.default_rng(self.seed + epoch).permutation(len(rows))
        chosen = order[
            offset * self.cfg.micro_batch_size : (offset + 1) * self.cfg.micro_batch_size
        ]
        return collate([rows[i] for i in chosen], self.cfg.context, self.pad_id)

    def evaluate(self, rows: list[Row]) -> float:
        self.engine.eval()
        total, count = 0.0, 0
        with torch.no_grad():
            for start in range(0, len(rows), self.cfg.micro_batch_size):
                batch = collate(
                    rows[start : start + self.cfg.micro_batch_size], self.cfg.context, self.pad_id
                )
                with autocast(self.precision):
                    loss, n = lm_loss(self.engine, batch, self.cfg.logprob_chunk)
                total, count = total + float(loss) * n, count + n
        self.engine.train()
        return total / max(1, count)

    def _resume(self, ckpt: Path) -> tuple[int, list[dict[str, float]]]:
        client = checkpoint.load(self.engine, ckpt, self.fingerprint, self.rank)
        if client is None:
            return 0, []
        torch.set_rng_state(client["torch_rng"])
        random.setstate(client["python_rng"])
        return int(client["step"]), list(client["history"])

    def _checkpoint(self, ckpt: Path, step: int, history: list[dict[str, float]]) -> None:
        client = {
            "step": step,
            "history": history,
            "torch_rng": torch.get_rng_state(),
            "python_rng": random.getstate(),
        }
        checkpoint.save(self.engine, ckpt, step, self.fingerprint, self.rank, client)

    def train(
        self,
        rows: list[Row],
        eval_rows: list[Row],
        ckpt: Path,
        on_log: Callable[[int, dict[str, float]], None],
        progress: bool = True,
    ) -> TrainResult:
        from tqdm import tqdm

        cfg = self.cfg
        start, history = self._resume(ckpt)
        if self.rank == 0:  # a declared DVC output, even when the run is shorter than one interval
            ckpt.mkdir(parents=True, exist_ok=True)
        result = TrainResult(step=start, history=history, resumed_from=start)
        began = time.perf_counter()
        window = {"loss": 0.0, "tokens": 0, "pad": 0, "slots": 0, "time": 0.0, "n": 0}
        bar = tqdm(
            total=cfg.max_steps, initial=start, desc="train", disable=not progress or self.rank != 0
        )
        for step in range(start, cfg.max_steps):
            tick = time.perf_counter()
            norm = None
            for micro in range(cfg.grad_accum):
                batch = self.micro_batch(rows, step * cfg.grad_accum + micro)
                with autocast(self.precision):  # backward runs outside, as autocast wants
                    loss, _ = lm_loss(self.engine, batch, cfg.logprob_chunk)
                self.engine.backward(loss)
                if micro == cfg.grad_accum - 1 and cfg.zero_stage == 0:
                    # ZeRO-0 keeps no global norm; read it before DeepSpeed clips and steps
                    grads = [p.grad for p in self.engine.module.parameters() if p.grad is not None]
                    norm = float(
                        torch.linalg.vector_norm(
                            torch.stack([torch.linalg.vector_norm(g) for g in grads])
                        )
                    )
                self.engine.step()
                window["loss"] += loss.item() / cfg.grad_accum
                window["tokens"] += int(batch["input_ids"].numel() - batch["pad_tokens"])
                window["pad"] += int(batch["pad_tokens"])
                window["slots"] += int(batch["input_ids"].numel())
            window["time"] += time.perf_counter() - tick
            window["n"] += 1
            bar.update(1)
            done = step + 1
            evaluate = bool(eval_rows) and (done % cfg.eval_every == 0 or done == cfg.max_steps)
            if done % cfg.log_every == 0 or done == cfg.max_steps or evaluate:
                norm = self.engine.get_global_grad_norm() if norm is None else norm
                metrics = {
                    "loss": window["loss"] / window["n"],
                    "lr": self.scheduler.get_last_lr()[0],
                    "grad_norm": float(norm) if norm is not None else float("nan"),
                    "tokens_per_s": window["tokens"] * self.world / max(window["time"], 1e-9),
                    "padding_share": window["pad"] / max(1, window["slots"]),
                    "step_time_s": window["time"] / window["n"],
                }
                if evaluate:
                    metrics["eval_loss"] = self.evaluate(eval_rows)
                history.append({"step": done, **metrics})
                on_log(done, metrics)
                bar.set_postfix(loss=f"{metrics['loss']:.3f}")
                window = dict.fromkeys(window, 0.0)
                window["n"] = 0
            if done % cfg.checkpoint_every == 0 and done < cfg.max_steps:
                self._checkpoint(ckpt, done, history)
        bar.close()
        result.step, result.history = cfg.max_steps, history
        result.seconds = time.perf_counter() - began
        return result

    def unwrapped(self) -> Any:
        return self.engine.module
