"""Models: a tiny Qwen2/Llama causal LM from config (the smoke profile), and loading a
saved model directory with errors that say what is wrong. Pretrained sources are in
``agentrl.model.source``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    LlamaConfig,
    PreTrainedModel,
    Qwen2Config,
)

from agentrl.chat.formats import ChatFormat
from agentrl.config import ModelSection
from agentrl.errors import ModelError
from agentrl.model.tokenizer import check_tokenizer


def build_tiny(cfg: ModelSection, tokenizer: Any, seed: int) -> PreTrainedModel:
    """A randomly initialised causal LM sized by ``cfg`` for ``tokenizer``'s vocabulary."""
    common = {
        "vocab_size": len(tokenizer),
        "hidden_size": cfg.hidden_size,
        "num_hidden_layers": cfg.num_layers,
        "num_attention_heads": cfg.num_heads,
        "num_key_value_heads": cfg.num_kv_heads,
        "intermediate_size": cfg.intermediate_size,
        "max_position_embeddings": cfg.context,
        "tie_word_embeddings": cfg.tie_embeddings,
        "bos_token_id": None,
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
    }
    config = Qwen2Config(**common) if cfg.arch == "qwen2" else LlamaConfig(**common)
    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(config, dtype=torch.float32)


def load_tokenizer_dir(path: Path, fmt: ChatFormat) -> Any:
    """The tokenizer saved with a model (an engine in another process still needs it)."""
    if not path.is_dir():
        raise ModelError(f"{path}: model directory not found (run the upstream stage)")
    if not (path / "tokenizer.json").is_file():
        raise ModelError(f"{path}: tokenizer.json is missing; the directory is not a saved model")
    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError) as err:
        raise ModelError(f"{path}: cannot load the tokenizer: {str(err)[:200]}") from err
    missing = check_tokenizer(tokenizer, fmt)
    if missing:
        raise ModelError(f"{path}: tokenizer lacks the '{fmt.name}' format tokens {missing}")
    return tokenizer


def load_model_dir(
    path: Path, fmt: ChatFormat, dtype: torch.dtype = torch.float32
) -> tuple[PreTrainedModel, Any]:
    """Load a model saved by a stage, its weights in ``dtype`` (float32: the masters a
    trainer updates); missing files and unfit tokenizers are ModelErrors."""
    if path.is_dir() and not (path / "config.json").is_file():
        raise ModelError(f"{path}: config.json is missing; the directory is not a saved model")
    tokenizer = load_tokenizer_dir(path, fmt)
    try:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    except (OSError, ValueError, RuntimeError) as err:
        raise ModelError(
            f"{path}: cannot load the model: {str(err).splitlines()[0][:200]}"
        ) from err
    return model, tokenizer
