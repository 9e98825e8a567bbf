"""The trainer's weights, handed to a rollout server: a snapshot on disk that the server
loads in place (vLLM ``reload_weights``, ``agentrl serve``/SGLang ``update_weights_from_disk``),
and a check that the server really samples from them.

Simplification: the weights go through the disk (a ~0.5 GB float32 write for the 135M
model). vLLM's NCCL/IPC weight transfer skips the disk on a GPU; on one CPU machine the
page cache makes the round trip cheap (``time_sync_s`` in plots/rl.tsv says how cheap).
"""

from __future__ import annotations

from pathlib import Path
from statistics import fmean
from typing import Any

import torch

from agentrl.atomic import atomic_dir
from agentrl.chat import ChatFormat, render_ids
from agentrl.harness.engine import Engine, EngineError, HFEngine, Sampling
from agentrl.model.logprobs import causal_lm, sequence_logprobs
from agentrl.model.untie import untie_embeddings
from agentrl.precision import Resolved, autocast

PROBE_TOKENS = 16


def write_snapshot(model: Any, path: Path, rank: int) -> Path:
    """``model``'s weights and config at ``path`` (replaced atomically, by rank 0), head
    untied. Every rank calls it: under ZeRO-3 the parameters are gathered from all of them."""
    import deepspeed

    with deepspeed.zero.GatheredParameters(list(model.parameters()), modifier_rank=None):
        if rank == 0:
            with atomic_dir(path) as tmp:
                model.save_pretrained(tmp)
                untie_embeddings(tmp, tmp)
    return path


@torch.no_grad()
def served_gap(
    engine: Engine,
    model: Any,
    tokenizer: Any,
    fmt: ChatFormat,
    record: dict[str, Any],
    chunk: int,
    precision: Resolved,
) -> float:
    """Mean |log-prob the server gave - log-prob ``model`` gives (at the trainer's
    ``precision``)| over the tokens the server samples for ``record``'s first turn."""
    prompt = render_ids(tokenizer, fmt, record["messages"][:1], record["tools"], True)[0]
    (generation,) = engine.generate([prompt], Sampling(PROBE_TOKENS, temperature=1.0, seed=0))
    if not generation.ids:
        return 0.0
    ids = torch.tensor([prompt + generation.ids])
    was_training = model.training
    model.eval()
    with autocast(precision):
        logp, _ = sequence_logprobs(model, ids, torch.ones_like(ids), chunk, entropy=False)
    model.train(was_training)
    trained = logp[0, len(prompt) :].tolist()
    return fmean(abs(a - b) for a, b in zip(generation.logprobs, trained, strict=True))


def check_served_weights(
    engine: Engine,
    model: Any,
    tokenizer: Any,
    fmt: ChatFormat,
    record: dict[str, Any],
    chunk: int,
    tolerance: float,
    precision: Resolved,
) -> float:
    """:func:`served_gap`, or :class:`EngineError` when it exceeds ``tolerance``
    (rl.sync_tolerance): the server does not serve ``model``."""
    gap = served_gap(engine, model, tokenizer, fmt, record, chunk, precision)
    if gap > tolerance:
        raise EngineError(
            "harness.engine_url: the rollout server does not sample from the weights rl sent "
            f"it (mean log-prob gap {gap:.3f} > rl.sync_tolerance {tolerance} on a probe): "
            "start it with infra/vllm_serve.sh (output head untied; VLLM_DTYPE the dtype of "
            "base.precision), serve the same precision with agentrl serve, and set "
            "harness.engine_reload to match the server"
        )
    return gap


@torch.no_grad()
def copy_weights(source: Any, target: Any) -> None:
    """Copy ``source``'s parameters and buffers into ``target`` (same modules, any dtype)."""
    target_state = target.state_dict()
    for name, value in source.state_dict().items():
        target_state[name].copy_(value)


def sync_weights(engine: Engine, module: Any, ckpt: Path, rank: int, world: int) -> None:
    """Give the rollout engine the weights of ``module`` (the module DeepSpeed trains). An
    in-process engine holds it already, or its copy in the generation precision, which is
    refreshed; its prefix cache holds keys of the old weights and is emptied. A server
    loads a snapshot (rank 0 asks it: one server for every rank)."""
    if isinstance(engine, HFEngine):
        policy = causal_lm(module)
        if engine.model is not policy:
            copy_weights(policy, engine.model)
        if engine.cache is not None:
            engine.cache.clear()
        return
    snapshot = write_snapshot(module, ckpt / "serving", rank)
    if world > 1:  # no rank still samples from the server when it swaps its weights
        torch.distributed.barrier()
    if rank == 0:
        engine.load_weights(snapshot)
    if world > 1:
        torch.distributed.barrier()
