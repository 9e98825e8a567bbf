"""Greedy first-turn decoding: does the model emit a valid call, and exactly the right one?

Validity: the output parses without errors into at least one call that names an offered
tool with arguments valid against its schema. Exact: the first call equals the reference
trajectory's first call (tool and every argument value, copied from the task).
"""

from __future__ import annotations

from typing import Any

import torch

from agentrl.chat import ChatFormat, parse, render_ids
from agentrl.envs.registry import Registry
from agentrl.model.generate import greedy_batch


@torch.no_grad()
def first_turn_check(
    model: Any,
    tokenizer: Any,
    fmt: ChatFormat,
    registry: Registry,
    records: list[dict[str, Any]],
    max_new_tokens: int,
    batch_size: int,
) -> dict[str, float]:
    model.eval()
    valid = exact = 0
    for start in range(0, len(records), batch_size):
        chunk = records[start : start + batch_size]
        prompts = [
            render_ids(tokenizer, fmt, r["messages"][:1], r["tools"], add_generation_prompt=True)[0]
            for r in chunk
        ]
        rows = greedy_batch(model, tokenizer, prompts, max_new_tokens)
        for record, row in zip(chunk, rows, strict=True):
            text = tokenizer.decode(row, skip_special_tokens=False)
            parsed = parse(text, fmt, record["tools"])
            tools, _ = registry.bind(record["env"])
            ok = (
                bool(parsed.calls)
                and not parsed.errors
                and all(tools.validate(c.name, c.arguments) is None for c in parsed.calls)
            )
            valid += ok
            reference = record["messages"][1]["tool_calls"][0]["function"]
            exact += (
                ok
                and parsed.calls[0].name == reference["name"]
                and parsed.calls[0].arguments == reference["arguments"]
            )
    n = max(1, len(records))
    return {"tool_call_validity": valid / n, "first_call_exact": exact / n, "samples": len(records)}
