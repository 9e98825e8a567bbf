"""Build the engine ``harness.engine`` names for a saved model, as rl, eval and the CLI do."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentrl.chat import ChatFormat
from agentrl.chat.formats import IM_END
from agentrl.config import HarnessSection
from agentrl.harness.engine import Engine, HFEngine
from agentrl.model.build import load_model_dir, load_tokenizer_dir
from agentrl.precision import DTYPES, Resolved, generation_model


def openai_engine(cfg: HarnessSection, tokenizer: Any) -> Engine:
    """The client of the server at ``cfg.engine_url``; ``tokenizer`` renders its prompts."""
    from agentrl.harness.openai_engine import OpenAIEngine

    stop_id = tokenizer.convert_tokens_to_ids(IM_END)
    return OpenAIEngine(cfg.engine_url, cfg.engine_model, stop_id, cfg.engine_reload)


def _hf_for_model_dir(
    cfg: HarnessSection, model_dir: Path, fmt: ChatFormat, precision: Resolved
) -> tuple[Engine, Any]:
    model, tokenizer = load_model_dir(model_dir, fmt, DTYPES[precision])
    return HFEngine(model, tokenizer, bucket=cfg.engine_batch), tokenizer


def _openai_for_model_dir(
    cfg: HarnessSection, model_dir: Path, fmt: ChatFormat, precision: Resolved
) -> tuple[Engine, Any]:
    tokenizer = load_tokenizer_dir(model_dir, fmt)
    return openai_engine(cfg, tokenizer), tokenizer


def _hf_for_trainer(
    cfg: HarnessSection, policy: Any, tokenizer: Any, precision: Resolved
) -> Engine:
    return HFEngine(generation_model(policy, precision), tokenizer, bucket=cfg.engine_batch)


def _openai_for_trainer(
    cfg: HarnessSection, policy: Any, tokenizer: Any, precision: Resolved
) -> Engine:
    return openai_engine(cfg, tokenizer)


@dataclass(frozen=True)
class EngineKind:
    """How one value of ``harness.engine`` is built, for a saved model or for a trainer."""

    for_model_dir: Callable[[HarnessSection, Path, ChatFormat, Resolved], tuple[Engine, Any]]
    for_trainer: Callable[[HarnessSection, Any, Any, Resolved], Engine]


# the registry of engines: harness.engine's choices are its keys (tests/test_lists.py)
ENGINES: dict[str, EngineKind] = {
    "hf": EngineKind(_hf_for_model_dir, _hf_for_trainer),
    "openai": EngineKind(_openai_for_model_dir, _openai_for_trainer),
}


def build_engine(
    cfg: HarnessSection, model_dir: Path, fmt: ChatFormat, precision: Resolved
) -> tuple[Engine, Any]:
    """The engine and the tokenizer for ``model_dir``: the hf engine's weights in
    ``precision``; the openai engine loads no weights here (the server holds them) but
    renders with the tokenizer saved beside them."""
    return ENGINES[cfg.engine].for_model_dir(cfg, model_dir, fmt, precision)


def trainer_engine(cfg: HarnessSection, policy: Any, tokenizer: Any, precision: Resolved) -> Engine:
    """The rollout engine of a trainer that holds ``policy`` (the causal LM it updates):
    the server's client for ``openai``; for ``hf`` an engine on ``policy`` itself, or on
    its bf16 copy when ``precision`` trains bf16 over float32 master weights (the copy is
    refreshed after every update: ``rl/weight_sync.py``)."""
    return ENGINES[cfg.engine].for_trainer(cfg, policy, tokenizer, precision)
