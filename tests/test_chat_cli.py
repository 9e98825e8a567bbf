"""``agentrl chat`` in a pseudo-terminal: a person types a question and sees the tool call,
the real tool's result and the answer as they happen; bad input is one line and exit 2.

The policy is scripted (the oracle's turns for the session's world), served over HTTP by
``agentrl serve``'s app, and reached through the openai engine: the command, the harness,
the tools and the terminal are the real ones."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pexpect
import pytest
import uvicorn
from conftest import (
    ScriptedEngine,
    free_port,
    oracle_script,
    read_split,
    small_params,
    stage_env,
    write_params,
)

from agentrl.chat import get_format, render_text
from agentrl.config import load_params
from agentrl.envs.registry import Registry
from agentrl.model.tokenizer import train_tokenizer
from agentrl.serve import build_app
from agentrl.terminal_chat import chat_world

FAMILY = "convert"


@pytest.fixture(scope="module")
def session(dataset: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """A saved tokenizer, params, the session's world and a scripted server for it."""
    root = tmp_path_factory.mktemp("chat")
    fmt = get_format("hermes")
    texts = [render_text(fmt, r["messages"], r["tools"])[0] for r in read_split(dataset, "sft")]
    tokenizer = train_tokenizer(texts, fmt, vocab_size=1024)
    tokenizer.save_pretrained(root / "model")
    params = write_params(root / "params.yaml", small_params())
    cfg = load_params(params)
    world = chat_world(Registry(), FAMILY, "test", 0, cfg.base.seed, str(params))
    engine = ScriptedEngine(tokenizer, [oracle_script(fmt, world)])
    port = free_port()
    app = build_app(engine, tokenizer, cfg.harness.engine_model, 4096)
    server = uvicorn.Server(uvicorn.Config(app, port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 30
    while True:
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            if time.time() > deadline:
                raise
            time.sleep(0.2)
    yield {"root": root, "params": params, "world": world, "url": url}
    server.should_exit = True
    thread.join(timeout=10)


def chat_command(session: dict, *extra: str) -> list[str]:
    return ["-m", "agentrl.cli", "chat", "--model", str(session["root"] / "model"), "--family",
            FAMILY, "--engine", "openai", "--url", session["url"], "--params",
            str(session["params"]), *extra]  # fmt: skip


def test_a_question_shows_the_call_the_result_and_the_answer(session: dict) -> None:
    world = session["world"]
    call = next(m for m in world["messages"] if m.get("tool_calls"))["tool_calls"][0]
    result = next(m for m in world["messages"] if m["role"] == "tool")["content"]
    answer = world["messages"][-1]["content"]
    env = stage_env(TERM="dumb", COLUMNS="200")
    child = pexpect.spawn(
        sys.executable, chat_command(session), cwd=session["root"], env=env,
        encoding="utf-8", timeout=120, dimensions=(50, 200),
    )  # fmt: skip
    try:
        child.expect("for example: ")
        child.expect("you> ")
        child.sendline(world["messages"][0]["content"])
        child.expect(rf"call {re.escape(call['function']['name'])} \{{")  # as it happens
        child.expect(rf"result {re.escape(result)} \(")  # the real tool's answer
        child.expect(rf"agent \([0-9.]+ s\): {re.escape(answer)}")
        child.expect(r"2 turns: generation [0-9.]+ s, tools [0-9.]+ s")
        child.expect("you> ")
        child.sendline("")
        child.expect(pexpect.EOF)
    finally:
        child.close()
    assert child.exitstatus == 0, child.before


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"model": "absent"}, "absent: model directory not found"),
        ({"model": "empty"}, "tokenizer.json is missing"),
        ({"family": "nope"}, "--family: unknown family 'nope'"),
        ({"split": "nope"}, "--split: unknown split 'nope'"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(session: dict, change: dict, named: str) -> None:
    (session["root"] / "empty").mkdir(exist_ok=True)
    command = chat_command(session)
    if "model" in change:
        command[command.index("--model") + 1] = str(session["root"] / change["model"])
    if "family" in change:
        command[command.index("--family") + 1] = change["family"]
    if "split" in change:
        command += ["--split", change["split"]]
    result = subprocess.run(
        [sys.executable, *command], cwd=session["root"], env=stage_env(), capture_output=True, text=True,
        stdin=subprocess.DEVNULL, timeout=120,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines() == [result.stderr.strip()], result.stderr
    assert named in result.stderr
