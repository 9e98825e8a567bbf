"""Token log-probs of a causal LM without full-vocabulary logits for every position.

A 49k vocabulary makes the logits the largest tensor of a training step: 8 sequences of
600 tokens are 0.9 GB in float32, and log-softmax, its backward and the entropy each
hold as much again (the rl stage reached 10 GB resident on SmolLM2-135M with them). Here
the decoder runs once to its last hidden states; the head, log-softmax, gather and
entropy then run over ``chunk`` positions at a time under activation checkpointing, so
only the hidden states are kept for backward and each chunk's logits are rebuilt there
(the idea of TRL's selective log-softmax and Liger's fused linear cross-entropy, in plain
PyTorch). Stated simplification: the head's output is taken as the logits (Llama, Qwen2;
no logit soft-capping or scaling, which Gemma-style models apply after the head).
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.checkpoint import checkpoint


def causal_lm(model: Any) -> Any:
    """The transformers CausalLM inside a DeepSpeed engine and/or a peft wrapper."""
    model = getattr(model, "module", model)  # DeepSpeed engine
    get_base = getattr(model, "get_base_model", None)  # peft
    return get_base() if callable(get_base) else model


def _chunk(
    head: torch.nn.Module,
    hidden: torch.Tensor,
    targets: torch.Tensor,
    entropy: list[torch.Tensor] | None,
    temperature: float = 1.0,
) -> torch.Tensor:
    """Log-probs of ``targets`` under softmax(logits / ``temperature``), in float32 whatever
    the autocast dtype of the head; the entropy (a figure) is appended to ``entropy`` on the
    first call only, so the recompute of activation checkpointing in backward does not pay
    for it again."""
    logits = head(hidden).float()
    if temperature != 1.0:
        logits = logits / temperature
    if entropy is not None and not entropy:
        with torch.no_grad():
            logp_all = torch.log_softmax(logits, dim=-1)
            entropy.append(-(logp_all.exp() * logp_all).sum(-1))
    return logits.gather(-1, targets[..., None])[..., 0] - torch.logsumexp(logits, dim=-1)


def head_logprobs(
    model: Any,
    hidden: torch.Tensor,
    targets: torch.Tensor,
    chunk: int,
    entropy: bool = True,
    keep: torch.Tensor | None = None,
    temperature: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-prob of ``targets`` (batch, tokens) given ``hidden`` (batch, tokens, width) under
    softmax(logits / ``temperature``) (rl: the rollouts' sampling temperature), and
    the entropy there (a detached figure; None without ``entropy``: the LM loss and the
    no-grad passes of rl skip the full-vocabulary exp and product it costs), computed
    ``chunk`` positions at a time.

    ``keep`` (batch, tokens, bool) names the positions whose log-prob is used (the loss
    mask): the head runs there only and the rest come out 0. The head is ~20% of a 135M
    model's FLOPs per position and its float32 log-softmax spans 49 k columns, while only
    ~22% of an sft row's positions are assistant targets, and an rl suffix's tool replies
    are no target either.
    """
    if keep is not None:
        rows = hidden.shape[0]
        flat = head_logprobs(
            model, hidden[keep][None], targets[keep][None], chunk * rows, entropy,
            temperature=temperature,
        )  # fmt: skip

        def place(values: torch.Tensor) -> torch.Tensor:
            return values.new_zeros(keep.shape).masked_scatter(keep, values[0])

        return place(flat[0]), None if flat[1] is None else place(flat[1])
    head = causal_lm(model).get_output_embeddings()
    targets = targets.clamp(min=0)  # ignored positions (-100) are masked by the caller
    taken, entropies = [], []
    for start in range(0, hidden.shape[1], chunk):
        kept: list[torch.Tensor] | None = [] if entropy else None
        # the head module itself, not its weight: peft's trainable tokens wrap it
        part = (
            head, hidden[:, start : start + chunk], targets[:, start : start + chunk], kept,
            temperature,
        )  # fmt: skip
        if torch.is_grad_enabled():
            taken.append(checkpoint(_chunk, *part, use_reentrant=False))
        else:
            taken.append(_chunk(*part))
        entropies += kept or []
    return torch.cat(taken, 1), torch.cat(entropies, 1) if entropy else None


def decoder_hidden(model: Any, **inputs: Any) -> torch.Tensor:
    """Last hidden states of the decoder (no head) for the usual forward ``inputs``."""
    return causal_lm(model).get_decoder()(**inputs).last_hidden_state


def sequence_logprobs(
    model: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    chunk: int,
    position_ids: torch.Tensor | None = None,
    entropy: bool = True,
    keep: torch.Tensor | None = None,
    temperature: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-prob of every token given the ones before (column t is token t; column 0 is 0)
    and the entropy of the distribution it was drawn from (None without ``entropy``); with
    ``keep`` (batch, tokens, bool: the columns that are used) the others come out 0."""
    hidden = decoder_hidden(
        model, input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids
    )
    targets = input_ids[:, 1:]
    kept = None if keep is None else keep[:, 1:]
    taken, spread = head_logprobs(model, hidden[:, :-1], targets, chunk, entropy, kept, temperature)
    zero = torch.zeros_like(taken[:, :1])
    return torch.cat([zero, taken], 1), None if spread is None else torch.cat([zero, spread], 1)
