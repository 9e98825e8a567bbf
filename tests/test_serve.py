"""`agentrl serve` as a real server process, driven by the openai engine and by the
official `openai` client: token-exact against the in-process engine, through the whole
harness, with weight reloads and clear errors."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import (
    TINY_MODEL,
    free_port,
    http_server,
    read_split,
    small_params,
    write_params,
)

from agentrl.chat import get_format, render_ids, render_text
from agentrl.chat.formats import IM_END
from agentrl.config import HarnessSection, ModelSection
from agentrl.envs.registry import Registry
from agentrl.harness.engine import EngineError, HFEngine, Sampling
from agentrl.harness.loop import Harness
from agentrl.harness.openai_engine import OpenAIEngine
from agentrl.model.build import build_tiny, load_model_dir
from agentrl.model.tokenizer import train_tokenizer
from agentrl.precision import DTYPES, generation_model, native_bf16, resolve

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def served(dataset: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    fmt = get_format("hermes")
    texts = [render_text(fmt, r["messages"], r["tools"])[0] for r in read_split(dataset, "sft")]
    tokenizer = train_tokenizer(texts, fmt, vocab_size=1024)
    home = tmp_path_factory.mktemp("serve")
    model_dir = home / "model"
    build_tiny(ModelSection(**TINY_MODEL), tokenizer, seed=0).save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    params = small_params()
    params["model"] = TINY_MODEL
    write_params(home / "params.yaml", params)
    port = free_port()
    command = [sys.executable, "-m", "agentrl.cli", "serve", "--model", str(model_dir)]
    command += ["--port", str(port), "--name", "tiny", "--params", str(home / "params.yaml")]
    url = f"http://127.0.0.1:{port}"
    with http_server(command, home / "serve.log", url, "agentrl serve"):
        # the server runs base.precision (auto): the in-process twin runs what it resolves to
        precision = resolve("auto", "cpu", native_bf16("cpu"))
        model, tokenizer = load_model_dir(model_dir, fmt, DTYPES[precision])
        yield {
            "precision": precision,
            "url": url,
            "model_dir": model_dir,
            "model": model,
            "tokenizer": tokenizer,
            "fmt": fmt,
            "home": home,
            "dataset": dataset,
        }


def prompts_of(served: dict, n: int) -> list[list[int]]:
    records = read_split(served["dataset"], "test")[:n]
    return [
        render_ids(served["tokenizer"], served["fmt"], r["messages"][:1], r["tools"], True)[0]
        for r in records
    ]


def engines(served: dict) -> tuple[HFEngine, OpenAIEngine]:
    stop_id = served["tokenizer"].convert_tokens_to_ids(IM_END)
    return HFEngine(served["model"], served["tokenizer"]), OpenAIEngine(
        served["url"], "tiny", stop_id
    )


def test_openai_engine_is_token_exact_with_the_in_process_engine(served: dict) -> None:
    local, remote = engines(served)
    prompts = prompts_of(served, 5)
    sampling = Sampling(max_new_tokens=24, temperature=1.0, top_p=0.9, seed=7)
    here, there = local.generate(prompts, sampling), remote.generate(prompts, sampling)
    for a, b in zip(here, there, strict=True):
        assert a.ids == b.ids and a.stopped == b.stopped
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-5)
    greedy = Sampling(max_new_tokens=16, temperature=0.0)
    assert [g.ids for g in remote.generate(prompts, greedy)] == [
        g.ids for g in local.generate(prompts, greedy)
    ]


def test_whole_harness_through_the_server_equals_in_process(served: dict) -> None:
    local, remote = engines(served)
    records = [r for r in read_split(served["dataset"], "test") if r["env"]][:4]
    cfg = HarnessSection(max_turns=3, max_new_tokens=32, context_limit=512, temperature=1.0)
    runs = []
    for engine in (local, remote):
        harness = Harness(engine, served["tokenizer"], served["fmt"], Registry(), cfg)
        runs.append(harness.run(records, samples=2, seed=3))
        harness.close()
    for a, b in zip(*runs, strict=True):
        assert [s.ids for s in a.segments] == [s.ids for s in b.segments]
        assert [s.loss_mask for s in a.segments] == [s.loss_mask for s in b.segments]
        assert a.reward == b.reward and a.end_reason == b.end_reason


def test_the_official_openai_client_gets_text_and_token_ids(served: dict) -> None:
    from openai import OpenAI

    client = OpenAI(base_url=f"{served['url']}/v1", api_key="unused")
    assert [m.id for m in client.models.list().data] == ["tiny"]
    reply = client.completions.create(
        model="tiny",
        prompt="<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n",
        max_tokens=12,
        temperature=0,
        logprobs=0,
        extra_body={"return_token_ids": True},
    )
    choice = reply.choices[0]
    ids = choice.model_extra["token_ids"]
    assert len(ids) == len(choice.logprobs.token_logprobs) >= 1
    shown = [i for i in ids if i != served["tokenizer"].convert_tokens_to_ids(IM_END)]
    assert choice.text == served["tokenizer"].decode(shown, skip_special_tokens=True)
    stop = served["tokenizer"].decode(ids[2:4])
    cut = client.completions.create(
        model="tiny",
        prompt="<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n",
        max_tokens=12,
        temperature=0,
        stop=[stop],
        extra_body={"return_token_ids": True},
    )
    assert cut.choices[0].finish_reason == "stop" and stop not in cut.choices[0].text
    assert len(cut.choices[0].model_extra["token_ids"]) <= 4
    batch = client.completions.create(model="tiny", prompt=prompts_of(served, 2), max_tokens=4, n=2)
    assert len(batch.choices) == 4 and reply.usage.completion_tokens == len(ids)


def test_reload_serves_the_new_weights(served: dict, tmp_path: Path) -> None:
    _, remote = engines(served)
    prompts = prompts_of(served, 3)
    sampling = Sampling(max_new_tokens=12, temperature=1.0, seed=5)

    def generated(engine) -> tuple[list[list[int]], list[float]]:
        out = engine.generate(prompts, sampling)
        return [g.ids for g in out], [x for g in out for x in g.logprobs]

    def same(a: tuple, b: tuple) -> bool:  # bf16 logits: a batch's sums may round apart
        return a[0] == b[0] and a[1] == pytest.approx(b[1], abs=1e-3)

    before = generated(remote)
    changed = build_tiny(ModelSection(**TINY_MODEL), served["tokenizer"], seed=1)
    changed.save_pretrained(tmp_path / "step1")
    remote.load_weights(tmp_path / "step1")
    twin = HFEngine(generation_model(changed, served["precision"]), served["tokenizer"])
    after = generated(remote)
    assert same(after, generated(twin)) and not same(after, before)
    with pytest.raises(EngineError, match="cannot load weights"):
        remote.load_weights(tmp_path / "missing")
    remote.load_weights(served["model_dir"])  # back to the served checkpoint for other tests
    assert same(generated(remote), before)


def test_bad_requests_and_a_missing_server_are_clear_errors(served: dict) -> None:
    _, remote = engines(served)
    with pytest.raises(EngineError, match="outside the vocabulary"):
        remote.generate([[10**6]], Sampling(4))
    with pytest.raises(EngineError, match="exceeds the context limit"):
        remote.generate([[1] * 2000], Sampling(64))
    stop_id = served["tokenizer"].convert_tokens_to_ids(IM_END)
    nowhere = OpenAIEngine(f"http://127.0.0.1:{free_port()}", "tiny", stop_id)
    with pytest.raises(EngineError, match="cannot reach the server"):
        nowhere.generate([[1, 2]], Sampling(4))


def test_rollout_cli_through_the_server_and_serve_errors(served: dict, tmp_path: Path) -> None:
    import json

    home = served["home"]
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "synth").symlink_to(served["dataset"])
    params = small_params()
    params["model"] = TINY_MODEL
    params["base"]["paths"] = {"data": str(tmp_path / "data")}
    params["harness"] = {"engine_model": "tiny", "max_new_tokens": 32, "max_turns": 2}
    write_params(tmp_path / "params.yaml", params)
    out = tmp_path / "runs.jsonl"
    command = [sys.executable, "-m", "agentrl.cli", "rollout", "--model", str(served["model_dir"])]
    command += ["--engine", "openai", "--url", served["url"], "--n", "2", "--out", str(out)]
    command += ["--params", str(tmp_path / "params.yaml")]
    done = subprocess.run(command, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert len(out.read_text().splitlines()) == 2 and "grounded_success" in done.stdout
    assert all(json.loads(line)["segments"] for line in out.read_text().splitlines())
    down = subprocess.run(
        [*command[:-2], "--url", f"http://127.0.0.1:{free_port()}", "--params", command[-1]],
        capture_output=True,
        text=True,
    )
    # a server that does not answer may be starting: exit 3, which the flow retries
    assert down.returncode == 3 and "harness.engine_url" in down.stderr
    assert "cannot reach the server" in down.stderr
    missing = subprocess.run(
        [
            *command[:3],
            "serve",
            "--model",
            str(home / "nope"),
            "--params",
            str(home / "params.yaml"),
        ],
        capture_output=True,
        text=True,
    )
    assert missing.returncode == 2 and "model directory not found" in missing.stderr
    assert "Traceback" not in missing.stderr
