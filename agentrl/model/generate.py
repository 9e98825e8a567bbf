"""Batched greedy decoding of token-id prompts with an in-process transformers model."""

from __future__ import annotations

from typing import Any

import torch

from agentrl.chat.formats import IM_END


def left_pad(prompts: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Input ids and attention mask with every prompt right-aligned, as generation needs."""
    width = max(map(len, prompts))
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(prompts), width), dtype=torch.long)
    for i, prompt in enumerate(prompts):
        ids[i, width - len(prompt) :] = torch.tensor(prompt)
        attention[i, width - len(prompt) :] = 1
    return ids, attention


@torch.no_grad()
def greedy_batch(
    model: Any, tokenizer: Any, prompts: list[list[int]], max_new_tokens: int
) -> list[list[int]]:
    """The greedy continuation of each prompt, up to and including the end-of-turn token."""
    ids, attention = left_pad(prompts, tokenizer.pad_token_id)
    out = model.generate(
        input_ids=ids,
        attention_mask=attention,
        max_new_tokens=max_new_tokens,
        do_sample=False,
        eos_token_id=tokenizer.convert_tokens_to_ids(IM_END),
        pad_token_id=tokenizer.pad_token_id,
    )
    return out[:, ids.shape[1] :].tolist()
