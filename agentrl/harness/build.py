"""Build the engine ``harness.engine`` names for a saved model, as rl, eval and the CLI do."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentrl.chat import ChatFormat
from agentrl.chat.formats import IM_END
from agentrl.config import HarnessSection
from agentrl.harness.engine import Engine, HFEngine
from agentrl.model.build import load_model_dir, load_tokenizer_dir
from agentrl.precision import DTYPES, Resolved


def openai_engine(cfg: HarnessSection, tokenizer: Any) -> Engine:
    """The client of the server at ``cfg.engine_url``; ``tokenizer`` renders its prompts."""
    from agentrl.harness.openai_engine import OpenAIEngine

    stop_id = tokenizer.convert_tokens_to_ids(IM_END)
    return OpenAIEngine(cfg.engine_url, cfg.engine_model, stop_id, cfg.engine_reload)


def build_engine(
    cfg: HarnessSection, model_dir: Path, fmt: ChatFormat, precision: Resolved
) -> tuple[Engine, Any]:
    """The engine and the tokenizer for ``model_dir``; the hf engine's weights are in
    ``precision``; the openai engine loads no weights here (the server holds them) but
    renders with the tokenizer saved beside them."""
    if cfg.engine == "openai":
        tokenizer = load_tokenizer_dir(model_dir, fmt)
        return openai_engine(cfg, tokenizer), tokenizer
    model, tokenizer = load_model_dir(model_dir, fmt, DTYPES[precision])
    return HFEngine(model, tokenizer, bucket=cfg.engine_batch), tokenizer
