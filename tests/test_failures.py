"""The failure breakdown on real harness episodes: a scripted policy makes each kind of
mistake on a two-call task, with the task's real tools answering."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import ScriptedEngine, oracle_script, read_split

from agentrl.chat import get_format, render_text
from agentrl.chat.render import render_assistant
from agentrl.config import HarnessSection
from agentrl.envs.registry import Registry
from agentrl.eval.failures import FAILURES, breakdown, expert_calls, failure_kind
from agentrl.harness.loop import Harness
from agentrl.model.tokenizer import train_tokenizer


def call_text(fmt, name: str, arguments: dict) -> str:
    message = {"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": name, "arguments": arguments}}]}  # fmt: skip
    return render_assistant(fmt, message).removesuffix("<|im_end|>")


def test_each_scripted_mistake_is_named_by_its_first_fault(dataset: Path) -> None:
    fmt = get_format("hermes")
    records = read_split(dataset, "sft")
    tokenizer = train_tokenizer(
        [render_text(fmt, r["messages"], r["tools"])[0] for r in records], fmt, vocab_size=1024
    )
    record = next(
        r for r in records
        if len(expert_calls(r)) == 2 and len(r["tools"]) > 2 and not r["meta"]["recovery"]
    )  # fmt: skip
    (first_name, first_args), _ = expert_calls(record)
    unused = next(
        t["function"]["name"]
        for t in record["tools"]
        if t["function"]["name"] not in {n for n, _ in expert_calls(record)}
    )
    key = sorted(first_args)[0]
    oracle = oracle_script(fmt, record)
    scripts = {
        "grounded": oracle,
        "wrong_answer": [*oracle[:-1], "Answer: -123456789"],
        "ran_out": [oracle[0]],  # the first call, again and again
        "malformed_call": ['<tool_call>\n{"name": \n</tool_call>'],
        "wrong_tool": [call_text(fmt, unused, {})],
        "wrong_argument_name": [call_text(fmt, first_name, first_args | {"zz_" + key: 1})],
        "wrong_value": [call_text(fmt, first_name, first_args | {key: "zz-not-it"})],
        "answered_early": [oracle[0], "Answer: -123456789"],
    }
    assert tuple(scripts) == FAILURES
    saved = []
    for script in scripts.values():  # one run each: the engine tells episodes apart by prompt
        engine = ScriptedEngine(tokenizer, [script])
        cfg = HarnessSection(max_turns=4, context_limit=4096)
        harness = Harness(engine, tokenizer, fmt, Registry(), cfg)
        (episode,) = harness.run([record])
        harness.close()
        saved.append(json.loads(json.dumps(episode.to_json())))  # as eval files hold them
    kinds = [failure_kind(e, record, fmt) for e in saved]
    assert kinds == list(FAILURES)
    assert breakdown(kinds) == dict.fromkeys(FAILURES, 1)
