"""Run BFCL's AST categories through our engine, chat format and parser.

Each question becomes one prompt: its user turn and its functions, rendered as our tools
in ``model.format``; the model answers in one greedy turn, our parser reads its calls,
and :mod:`agentrl.bfcl.checker` judges them. A prompt that does not fit the context with
room for the answer is scored wrong and counted under ``over_context``: the tiny default
model's 1,024 tokens cannot hold some of BFCL's long function descriptions.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from agentrl.bfcl.checker import check
from agentrl.bfcl.fetch import load
from agentrl.chat import ChatFormat, parse
from agentrl.chat.render import render_ids_batch
from agentrl.config import BFCLSection
from agentrl.harness.engine import Engine, Sampling
from agentrl.stats import wilson

JSON_TYPES = {"dict": "object", "float": "number", "tuple": "array", "any": "string"}


def json_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """BFCL's Python-flavoured parameter schema as JSON Schema (dict -> object, ...)."""
    out = dict(schema)
    if "type" in out:
        out["type"] = JSON_TYPES.get(out["type"], out["type"])
    if isinstance(out.get("properties"), dict):
        out["properties"] = {k: json_schema(v) for k, v in out["properties"].items()}
    if isinstance(out.get("items"), dict):
        out["items"] = json_schema(out["items"])
    return out


def as_tools(functions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "function": {
                "name": f["name"],
                "description": f.get("description", ""),
                "parameters": json_schema(f["parameters"]),
            },
        }
        for f in functions
    ]


def run_category(
    engine: Engine,
    tokenizer: Any,
    fmt: ChatFormat,
    category: str,
    pairs: list[tuple[dict, dict]],
    cfg: BFCLSection,
    context_limit: int,
    seed: int,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(metrics, per-question results) of one category."""
    conversations = [(q["question"][0], as_tools(q["function"])) for q, _ in pairs]
    rendered = render_ids_batch(tokenizer, fmt, conversations, add_generation_prompt=True)
    prompts = [ids for ids, _ in rendered]
    fits = [i for i, ids in enumerate(prompts) if len(ids) + cfg.max_new_tokens <= context_limit]
    generations = engine.generate(
        [prompts[i] for i in fits], Sampling(cfg.max_new_tokens, temperature=0.0, seed=seed)
    )
    texts = dict(zip(fits, (tokenizer.decode(g.ids) for g in generations), strict=True))
    results, reasons = [], Counter()
    for i, (question, answer) in enumerate(pairs):
        if i not in texts:
            verdict_ok, reason, calls = False, "over_context", []
        else:
            parsed = parse(texts[i], fmt, conversations[i][1])
            calls = [(c.name, c.arguments) for c in parsed.calls]
            if parsed.errors:
                verdict_ok, reason = False, "parse_error"
            elif not calls:
                verdict_ok, reason = False, "no_call"
            else:
                verdict = check(category, question["function"], calls, answer["ground_truth"])
                verdict_ok, reason = verdict.valid, "" if verdict.valid else "wrong_call"
        reasons[reason or "correct"] += 1
        results.append(
            {"id": question["id"], "correct": verdict_ok, "reason": reason,
             "prompt_tokens": len(prompts[i]), "output": texts.get(i, ""), "calls": calls}
        )  # fmt: skip
    rate = wilson(reasons["correct"], len(pairs))
    metrics = {
        "accuracy": round(rate.value, 4),
        "accuracy_low": round(rate.low, 4),
        "accuracy_high": round(rate.high, 4),
        "questions": len(pairs),
        **{
            reason: reasons[reason]
            for reason in ("over_context", "parse_error", "no_call", "wrong_call")
        },
    }
    return metrics, results


def load_questions(data: Path, cfg: BFCLSection) -> dict[str, list[tuple[dict, dict]]]:
    """Each category's first ``cfg.n`` (question, possible answer) pairs (all when 0)."""
    return {c: load(data, c)[: cfg.n or None] for c in cfg.categories}


def run_bfcl(
    engine: Engine,
    tokenizer: Any,
    fmt: ChatFormat,
    questions: dict[str, list[tuple[dict, dict]]],
    cfg: BFCLSection,
    context_limit: int,
    seed: int,
) -> tuple[dict[str, dict[str, Any]], dict[str, list[dict[str, Any]]]]:
    """Metrics and per-question results for every category of ``questions``."""
    metrics, results = {}, {}
    for category, pairs in questions.items():
        metrics[category], results[category] = run_category(
            engine, tokenizer, fmt, category, pairs, cfg, context_limit, seed
        )
    return metrics, results
