"""RL with a real vLLM (the CPU build, `make vllm`) as the rollout server: every update's
weights reach it, its log-probs are then the trainer's, and a server that dies fails the
run. Skipped, with the reason, only where the vLLM venv cannot be built."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from conftest import (
    ROOT,
    TINY_MODEL,
    digit_model,
    digit_tasks,
    free_port,
    http_server,
    project_params,
    read_split,
    stage_env,
    tiny_fit,
    write_params,
)

from agentrl.chat import get_format
from agentrl.config import HarnessSection, RLSection
from agentrl.envs.registry import Registry
from agentrl.errors import ServerUnreachable
from agentrl.harness.build import openai_engine
from agentrl.model.build import load_model_dir
from agentrl.rl.trainer import RLTrainer
from agentrl.rl.weight_sync import served_gap

pytestmark = pytest.mark.slow

# vLLM's CPU attention takes head sizes of 32 and up: the tests' tiny model, wider
VLLM_TINY = TINY_MODEL | {"hidden_size": 64, "intermediate_size": 128}


@pytest.fixture(scope="module")
def vllm_python() -> Path:
    done = subprocess.run(["make", "-C", str(ROOT), "vllm"], capture_output=True, text=True)
    if done.returncode:
        pytest.skip(f"the vLLM venv cannot be built here (make vllm): {done.stderr[-500:]}")
    return ROOT / ".venv-vllm" / "bin" / "python"


@pytest.fixture(scope="module")
def served(
    vllm_python: Path, dataset: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict]:
    home = tmp_path_factory.mktemp("vllm")
    model, tokenizer = digit_model(dataset, VLLM_TINY)
    model.save_pretrained(home / "sft")
    tokenizer.save_pretrained(home / "sft")
    with vllm_server(vllm_python, home / "sft", home) as url:
        yield {"url": url, "home": home, "model": model, "tokenizer": tokenizer,
               "python": vllm_python}  # fmt: skip


@contextlib.contextmanager
def vllm_server(vllm_python: Path, model_dir: Path, home: Path, *extra: str) -> Iterator[str]:
    """vLLM serving ``model_dir`` through infra/vllm_serve.sh, its files under ``home``;
    ``extra``: more vLLM arguments."""
    port = free_port()
    command = [str(ROOT / "infra" / "vllm_serve.sh"), str(model_dir), str(port), *extra]
    # float32, as the trainers here: their checks are token-exact (bf16: bench/served_gap.py)
    env = os.environ | {"VLLM_PYTHON": str(vllm_python), "VLLM_SERVED_DIR": str(home / "served"),
                        "VLLM_DTYPE": "float32"}  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    with http_server(command, home / "vllm.log", url, "vLLM", timeout_s=600, env=env):
        yield url


def harness_cfg(url: str) -> HarnessSection:
    return HarnessSection(
        engine="openai", engine_url=url, engine_reload="vllm", max_turns=1, max_new_tokens=8,
        context_limit=256,
    )  # fmt: skip


def test_every_update_reaches_vllm_and_its_logprobs_become_the_trainers(served: dict) -> None:
    fmt, tokenizer = get_format("hermes"), served["tokenizer"]
    tasks = digit_tasks(4, answer=7)
    cfg = RLSection(
        rollouts="episodes",
        steps=2, tasks_per_step=4, group_size=8, lr=1e-2, mini_batch=32, micro_batch_size=16,
        grounded_only=False, checkpoint_every=100, dynamic_sampling=False,
    )  # fmt: skip
    trainer = RLTrainer(
        cfg, harness_cfg(served["url"]), served["model"], tokenizer, fmt, Registry(), 0, "vllm",
        "fp32",
    )  # fmt: skip
    steps, history, _ = trainer.train(tasks, served["home"] / "ckpt", lambda *_: None)
    assert steps == 2 and all("update_skipped" not in h for h in history), history
    # a group's samples differ: some group has signal (one seed per request made them equal)
    assert min(h["zero_variance_share"] for h in history) < 1, history
    for h in history:
        # the rollouts came from the weights the trainer held: only kernel noise between them
        assert h["time_sync_s"] > 0 and h["rollout_train_logp_gap"] < 1e-3, h
    engine = openai_engine(harness_cfg(served["url"]), tokenizer)
    trained = served_gap(engine, trainer.engine.module, tokenizer, fmt, tasks[0], 64, "fp32")
    old, _ = load_model_dir(served["home"] / "sft", fmt)
    before = served_gap(engine, old, tokenizer, fmt, tasks[0], 64, "fp32")
    print(f"served vs trained {trained:.2e}, served vs the weights before {before:.3f}")
    assert trained < 1e-3 < cfg.sync_tolerance < before
    trainer.harness.close()


def test_one_step_off_policy_overlaps_rollouts_and_updates_and_resumes(
    served: dict, tmp_path: Path
) -> None:
    fmt, tokenizer = get_format("hermes"), served["tokenizer"]
    tasks = digit_tasks(4, answer=7)

    def trainer(steps: int) -> RLTrainer:
        model, _ = load_model_dir(served["home"] / "sft", fmt)
        cfg = RLSection(
            rollouts="episodes",
            steps=steps, tasks_per_step=4, group_size=8, lr=1e-3, mini_batch=32,
            micro_batch_size=16, grounded_only=False, checkpoint_every=1,
            dynamic_sampling=False, max_staleness=1, reward="random",
        )  # fmt: skip
        return RLTrainer(
            cfg, harness_cfg(served["url"]), model, tokenizer, fmt, Registry(), 0, "a", "fp32"
        )

    class Killed(Exception):
        pass

    logged: dict[int, dict] = {}

    def die_after_two(step: int, metrics: dict) -> None:
        logged[step] = metrics
        if step == 2:  # checkpoint 2 is written after the log: it dies before it
            raise Killed

    first = trainer(4)
    with pytest.raises(Killed):
        first.train(tasks, tmp_path / "ckpt", die_after_two)
    first.harness.close()
    second = trainer(4)
    steps, history, resumed = second.train(tasks, tmp_path / "ckpt", lambda *_: None)
    second.harness.close()
    assert (steps, resumed, len(history)) == (4, 1, 4)
    # step 2's rollouts ran ahead before the kill and were checkpointed with step 1: the
    # resumed run trains on them (same random rewards, same loss), one version behind
    for key in ("reward_mean", "reward_std", "grounded_success", "policy_loss", "staleness"):
        assert history[1][key] == logged[2][key], key
    assert [h["staleness"] for h in history] == [0.0, 1.0, 1.0, 1.0]
    for h in history:
        print(h["step"], {k: round(v, 3) for k, v in h.items() if k.startswith("time_")})
    # while steps 1-3 updated, the next step's rollouts were being generated; step 4 is last
    assert all(h["time_overlap_s"] > 0 for h in history[:3]), history
    assert history[3]["time_overlap_s"] == 0.0


def end_server(url: str) -> None:
    """End the server's process group (vLLM, its engine core and workers) with SIGKILL."""
    import psutil

    port = int(url.rsplit(":", 1)[1])
    (pid,) = {
        c.pid for c in psutil.net_connections("tcp")
        if c.laddr and c.laddr.port == port and c.status == psutil.CONN_LISTEN
    }  # fmt: skip
    os.killpg(os.getpgid(pid), signal.SIGKILL)


def test_the_rl_stage_runs_through_vllm(served: dict, dataset: Path, tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "synth").symlink_to(dataset)
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "sft").symlink_to(served["home"] / "sft")
    params = project_params()
    params["model"] = VLLM_TINY
    params["harness"] |= {"engine": "openai", "engine_url": served["url"], "engine_reload": "vllm"}
    params["rl"] |= {"steps": 2, "dynamic_sampling": False, "max_staleness": 1}
    write_params(tmp_path / "params.yaml", params)
    env = stage_env(MLFLOW_TRACKING_URI=f"sqlite:///{tmp_path / 'mlflow.db'}")
    done = subprocess.run([sys.executable, str(ROOT / "stages" / "rl.py")], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=600)  # fmt: skip
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    assert "rl: the rollout server samples from the trainer's weights" in out
    assert "rl: 2 steps, resumed from step 0" in out
    rows = (tmp_path / "plots" / "rl.tsv").read_text().splitlines()
    header = rows[0].split("\t")
    assert len(rows) == 3 and [r.split("\t")[header.index("staleness")] for r in rows[1:]] == [
        "0.0",
        "1.0",
    ]
    assert (tmp_path / "models" / "rl" / "model.safetensors").is_file()


def test_seeded_long_prompts_in_one_batch(served: dict) -> None:
    """Prompts whose prefills together exceed vLLM's default token budget: on CPU a split
    prefill of a seeded request used to kill the engine (infra/vllm_serve.sh's budget)."""
    from agentrl.harness.engine import Sampling

    engine = openai_engine(harness_cfg(served["url"]), served["tokenizer"])
    prompts = [[(7 * i + j) % 900 + 50 for j in range(480)] for i in range(24)]
    out = engine.generate(prompts, Sampling(8, seed=5))
    assert len(out) == 24 and all(len(g.ids) == len(g.logprobs) > 0 for g in out)


def test_a_groups_identical_prompts_sample_distinct_reproducible_completions(
    served: dict,
) -> None:
    """vLLM applies a request's seed to each of its prompts: one request for a group's G
    identical prompts gave one completion G times, and no group had any signal."""
    from agentrl.harness.engine import Sampling

    engine = openai_engine(harness_cfg(served["url"]), served["tokenizer"])
    group = [[5, 6, 7, 8]] * 8
    first = [tuple(g.ids) for g in engine.generate(group, Sampling(8, temperature=1.0, seed=3))]
    again = [tuple(g.ids) for g in engine.generate(group, Sampling(8, temperature=1.0, seed=3))]
    assert first == again and len(set(first)) > 4, first
    engine.close()


def test_a_reload_that_fails_is_an_error_naming_the_setting(served: dict, tmp_path: Path) -> None:
    from agentrl.harness.engine import EngineError, Sampling

    # vLLM's engine core does not survive a failed reload_weights: a server of its own
    with vllm_server(served["python"], served["home"] / "sft", tmp_path) as url:
        engine = openai_engine(harness_cfg(url), served["tokenizer"])
        assert engine.generate([[1, 2, 3]], Sampling(4, seed=1))[0].ids
        with pytest.raises(EngineError, match=r"harness\.engine_reload vllm: .* load .*missing"):
            engine.load_weights(tmp_path / "missing")
        # /health still answers, but generating is an error, never an empty episode
        with pytest.raises(EngineError, match="HTTP 500"):
            engine.generate([[1, 2, 3]], Sampling(4, seed=1))
        engine.close()


def test_a_rollout_server_that_dies_mid_run_fails_the_run(served: dict, tmp_path: Path) -> None:
    fmt, tokenizer = get_format("hermes"), served["tokenizer"]
    model, _ = load_model_dir(served["home"] / "sft", fmt)
    cfg = RLSection(
        rollouts="episodes", steps=3, tasks_per_step=2, group_size=2, checkpoint_every=100
    )
    trainer = RLTrainer(
        cfg, harness_cfg(served["url"]), model, tokenizer, fmt, Registry(), 0, "x", "fp32"
    )
    logged: list[int] = []

    def after_step(step: int, _: dict) -> None:
        logged.append(step)
        if step == 1:
            end_server(served["url"])

    with pytest.raises(ServerUnreachable, match=r"harness\.engine_url"):
        trainer.train(digit_tasks(2, answer=7), tmp_path / "ckpt", after_step)
    assert logged == [1]  # step 2 was never scored: no episode got a silent 0
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"{served['url']}/health", timeout=5)
    trainer.harness.close()


@pytest.fixture(scope="module")
def tool_served(
    vllm_python: Path, dataset: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict]:
    """A tiny model that learnt one task's expert turns, served with vLLM's hermes parser."""
    home = tmp_path_factory.mktemp("vllm-tools")
    record = next(
        r for r in read_split(dataset, "sft")
        if [m["role"] for m in r["messages"]] == ["user", "assistant", "tool", "assistant"]
    )  # fmt: skip
    model, tokenizer = tiny_fit(
        dataset, VLLM_TINY, lambda _: [(record["messages"], record["tools"])], steps=400
    )
    model.save_pretrained(home / "agent")
    tokenizer.save_pretrained(home / "agent")
    with vllm_server(vllm_python, home / "agent", home) as url:  # hermes parser: the default
        yield {"url": url, "record": record}


def test_an_openai_client_gets_tool_calls_sends_results_and_gets_the_answer(
    tool_served: dict,
) -> None:
    """The served model through the openai SDK, as any client would use it: the task's tools
    and question in, a tool_calls entry out, the real tool's result back, the answer out."""
    import json

    import openai

    record = tool_served["record"]
    expert = record["messages"][1]["tool_calls"][0]["function"]
    client = openai.OpenAI(base_url=f"{tool_served['url']}/v1", api_key="unused")
    messages: list = [record["messages"][0]]
    first = client.chat.completions.create(
        model="policy", messages=messages, tools=record["tools"], temperature=0, max_tokens=96
    )
    assert first.choices[0].finish_reason == "tool_calls", first
    (call,) = first.choices[0].message.tool_calls
    assert call.function.name == expert["name"]
    assert json.loads(call.function.arguments) == expert["arguments"]
    tools, box = Registry().bind(record["env"])
    observed = tools.call(call.function.name, json.loads(call.function.arguments))
    box.close()
    assert observed.ok and observed.text == record["messages"][2]["content"]
    messages += [
        first.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": observed.text},
    ]
    second = client.chat.completions.create(
        model="policy", messages=messages, tools=record["tools"], temperature=0, max_tokens=96
    )
    assert not second.choices[0].message.tool_calls
    assert second.choices[0].message.content == record["messages"][3]["content"]


def test_a_malformed_tools_list_gets_vllms_own_400(tool_served: dict) -> None:
    import openai

    client = openai.OpenAI(base_url=f"{tool_served['url']}/v1", api_key="unused")
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(
            model="policy", messages=[{"role": "user", "content": "hi"}],
            tools=[{"type": "function", "function": {"parameters": "not a schema"}}],
        )  # fmt: skip
    assert caught.value.status_code == 400
