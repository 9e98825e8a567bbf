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
from agentrl.harness.engine import Engine, EngineError, Sampling
from agentrl.model.logprobs import sequence_logprobs
from agentrl.model.untie import untie_embeddings

# mean |served - trained| log-prob of a probe's sampled tokens: the same weights in float32
# agree to ~1e-5 (vLLM CPU against transformers, measured); other weights, another dtype or
# a head tied at launch (untie.py) are off by far more
PROBE_TOLERANCE = 0.02
PROBE_TOKENS = 16


def write_snapshot(model: Any, path: Path) -> Path:
    """``model``'s weights and config at ``path`` (replaced atomically), head untied."""
    with atomic_dir(path) as tmp:
        model.save_pretrained(tmp)
        untie_embeddings(tmp, tmp)
    return path


@torch.no_grad()
def served_gap(
    engine: Engine, model: Any, tokenizer: Any, fmt: ChatFormat, record: dict[str, Any], chunk: int
) -> float:
    """Mean |log-prob the server gave - log-prob ``model`` gives| over the tokens the
    server samples for ``record``'s first turn."""
    prompt = render_ids(tokenizer, fmt, record["messages"][:1], record["tools"], True)[0]
    (generation,) = engine.generate([prompt], Sampling(PROBE_TOKENS, temperature=1.0, seed=0))
    if not generation.ids:
        return 0.0
    ids = torch.tensor([prompt + generation.ids])
    was_training = model.training
    model.eval()
    logp, _ = sequence_logprobs(model, ids, torch.ones_like(ids), chunk)
    model.train(was_training)
    trained = logp[0, len(prompt) :].tolist()
    return fmean(abs(a - b) for a, b in zip(generation.logprobs, trained, strict=True))


def check_served_weights(
    engine: Engine, model: Any, tokenizer: Any, fmt: ChatFormat, record: dict[str, Any], chunk: int
) -> float:
    """:func:`served_gap`, or :class:`EngineError` when the server does not serve ``model``."""
    gap = served_gap(engine, model, tokenizer, fmt, record, chunk)
    if gap > PROBE_TOLERANCE:
        raise EngineError(
            f"harness.engine_url: the rollout server does not sample from the weights rl "
            f"sent it (mean log-prob gap {gap:.3f} > {PROBE_TOLERANCE} on a probe): start it "
            f"with infra/vllm_serve.sh (float32, output head untied) and "
            f"harness.engine_reload matching the server"
        )
    return gap
