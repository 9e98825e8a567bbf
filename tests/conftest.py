"""Shared fixtures: small params files, a real `mlflow server`, and a synthesized dataset."""

from __future__ import annotations

import contextlib
import copy
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
PLUGINS = Path(__file__).parent / "plugins"
sys.path.insert(0, str(PLUGINS))

os.environ.setdefault("DVC_NO_ANALYTICS", "1")
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("DO_NOT_TRACK", "1")


def _native_bf16() -> bool:
    from agentrl.precision import device_type, native_bf16

    return native_bf16(device_type())


# both precisions where this machine has native bf16; fp32 alone elsewhere (forced bf16 is
# refused there, and emulated bf16 would be slow, not wrong)
PRECISIONS = [
    "fp32",
    pytest.param(
        "bf16", marks=pytest.mark.skipif(not _native_bf16(), reason="no native bf16 here")
    ),
]

SMALL_SPLITS: dict[str, Any] = {
    "midtrain": {
        "n": 60,
        "recovery_prob": 0.3,
        "copy_items": 10,
        "difficulty": {"hops": [1, 2], "ops": [1, 2], "horizon": [1, 3], "num_tools": [2, 4]},
    },
    "sft": {"n": 40, "rename_prob": 0.5, "recovery_prob": 0.3, "curriculum": True},
    "rl": {"n": 20, "rename_prob": 0.5},
    "test": {"n": 30, "rename_prob": 0.5},
    "heldout_tools": {"n": 30},
    "heldout_compose": {
        "n": 15,
        "families": ["calculator", "knowledge_base", "compose"],
        "difficulty": {"hops": [3, 4], "ops": [3, 4]},
    },
    "long_horizon": {
        "n": 5,
        "families": ["store", "calculator"],
        "min_tokens": 1024,
        "difficulty": {"ops": [10, 12], "horizon": [10, 12], "num_tools": [4, 5]},
    },
}


def small_params(**synth_overrides: Any) -> dict[str, Any]:
    """A complete params dict with tiny splits; keyword arguments override synth keys."""
    synth = {
        "workers": 1,
        "shard_size": 25,
        # dvc.yaml names these keys for sft, rl and eval: written out, as in params.yaml
        "heldout_tool_share": 0.25,
        "envs": [],
        "splits": copy.deepcopy(SMALL_SPLITS),
    } | synth_overrides
    paths = {
        "data": "data",
        "models": "models",
        "metrics": "metrics",
        "plots": "plots",
        "reports": "reports",
        "checkpoints": "checkpoints",
    }
    return {
        "base": {"seed": 7, "precision": "auto", "paths": paths},
        "tracking": {"experiment": "agentrl-tests", "log_samples": 2},
        "synth": synth,
    }


# The fast tests run the smoke profile's model (tiny, from config), shrunk further.
SMOKE = yaml.safe_load((ROOT / "infra" / "profiles" / "smoke.yaml").read_text())
TINY_MODEL = {
    "source": SMOKE["model"]["source"],
    "format": "hermes",  # dvc.yaml reads model.format from params.yaml, so it must be written out
    "vocab_size": 512,
    "tokenizer_samples": 200,
    "hidden_size": 32,
    "num_layers": 1,
    "num_heads": 2,
    "num_kv_heads": 1,
    "intermediate_size": 64,
    "context": 512,
}
TRAIN = {
    "context": 512,
    "micro_batch_size": 2,
    "max_steps": 40,
    "log_every": 5,
    "eval_every": 10,
    "checkpoint_every": 10,
    "warmup_steps": 2,
    "lr": 0.003,  # the tiny model's rate (smoke profile), not the 135M default's
    "threads": 1,
}


def project_params(**train) -> dict:
    params = small_params()
    params["model"] = TINY_MODEL
    params["midtrain"] = TRAIN | train
    params["sft"] = (
        TRAIN
        | {
            "loss_on": "assistant",
            "max_steps": 10,
            "format_check": {"samples": 8, "max_new_tokens": 48},
        }
        | train
    )
    params["harness"] = {"max_turns": 2, "max_new_tokens": 16, "context_limit": 512}
    params["pivots"] = {
        "split": "rl",
        "tasks": 4,
        "samples": 2,
        "min_pass_rate": 0.0,
        "max_pass_rate": 1.0,
    }
    params["rl"] = {
        "advantage": "grpo",  # present, as in params.yaml: `dvc exp run -S` overrides keys
        "reward": "verifier",
        "grounded_only": True,
        "rollouts": "episodes",  # a pivots stage param: DVC needs it in params.yaml
        "steps": 2,
        "tasks_per_step": 2,
        "group_size": 2,
        "max_resample": 0,
        "lr": 1.0e-4,  # the smoke profile's
        "mini_batch": 4,
        "micro_batch_size": 2,
        "threads": 1,
    }
    params["eval"] = {
        "checkpoints": ["midtrain", "sft", "rl"],
        "tasks": 2,
        "samples": 2,
        "seed": 0,  # present: `dvc exp run -S eval.seed=1` overrides it
        "pass_k": [1, 2],
        "trajectories": 1,
        "variants": [  # turn budgets over the longest expert trajectory (the stage checks)
            {"name": "sampled", "harness": {"max_turns": 14}},
            {
                "name": "summary",
                "harness": {"context": "summary", "max_turns": 20},
                "splits": ["long_horizon"],
            },
        ],
        # dvc.yaml names these keys: they must be written out, as in params.yaml
        "bfcl": {
            "package": "bfcl-eval==2026.3.23",
            "sha256": "3bb6dfa5f0c68ad403c9ec50b00db2bb3b4cc9b38ab1ff33f48fe30d853d3a0a",
            "categories": ["simple", "multiple", "parallel"],
            "n": 2,
            "max_new_tokens": 16,
        },
    }
    return params


def write_params(path: Path, params: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(params, sort_keys=False))
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stage_env(**extra: str) -> dict[str, str]:
    # an in-process trainer set up a gloo group of one through these: a stage is its own
    launched = {"MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK"}
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("MLFLOW_TRACKING", "AGENTRL_")) and k not in launched
    }
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(PLUGINS)])
    return env | extra


def run_stage(
    cwd: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "stages" / "synth.py"), *args],
        cwd=cwd,
        env=env or stage_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )


@contextmanager
def http_server(
    command: list[str], log_path: Path, url: str, what: str, timeout_s: float = 120, **popen
) -> Iterator[str]:
    """Run ``command`` in its own process group until ``url``/health answers; yield ``url``
    and end the group afterwards. A server that dies or never answers fails with its log."""
    log = log_path.open("w")
    proc = subprocess.Popen(
        command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, **popen
    )
    try:
        deadline = time.time() + timeout_s
        while True:
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"{what} did not start: {log_path.read_text()[-2000:]}")
            time.sleep(0.3)
        yield url
    finally:
        with contextlib.suppress(ProcessLookupError):  # a test may have ended it already
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        log.close()


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real `mlflow server` on 127.0.0.1 in its own process group, ended after the session."""
    home = tmp_path_factory.mktemp("mlflow")
    port = free_port()
    command = [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1"]
    command += ["--port", str(port), "--backend-store-uri", f"sqlite:///{home / 'mlflow.db'}"]
    command += ["--artifacts-destination", str(home / "artifacts"), "--workers", "1"]
    url = f"http://127.0.0.1:{port}"
    with http_server(command, home / "server.log", url, "mlflow server", cwd=home) as uri:
        yield uri


def read_split(root: Path, split: str) -> list[dict[str, Any]]:
    from agentrl.dataset import split_dir

    records = []
    for shard in sorted(split_dir(root, split).glob("shard-*.jsonl")):
        records += [json.loads(line) for line in shard.read_text().splitlines()]
    return records


@pytest.fixture(scope="session")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A moderately sized synthesized dataset (in process), shared by the data tests."""
    from agentrl.config import SynthSection
    from agentrl.synth.pipeline import build_registry, synthesize

    splits = copy.deepcopy(SMALL_SPLITS)
    for split, n in {
        "midtrain": 600,
        "sft": 300,
        "rl": 200,
        "test": 200,
        "heldout_tools": 200,
        "heldout_compose": 80,
    }.items():
        splits[split]["n"] = n
    cfg = SynthSection.model_validate_json(
        json.dumps({"workers": 2, "shard_size": 100, "splits": splits})
    )
    out = tmp_path_factory.mktemp("dataset")
    synthesize(cfg, 11, out, build_registry(cfg), progress=False)
    return out


BIN = Path(sys.executable).parent


def repo_run(repo: Path, *cmd: str, **extra_env: str) -> subprocess.CompletedProcess[str]:
    """``cmd`` in ``repo`` with the venv's tools first on PATH and a git identity."""
    env = stage_env(
        PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}",
        PYTHONPATH=str(repo),  # the repository's own copy of agentrl, as on a clone
        GIT_AUTHOR_NAME="ci",
        GIT_AUTHOR_EMAIL="ci@localhost",
        GIT_COMMITTER_NAME="ci",
        GIT_COMMITTER_EMAIL="ci@localhost",
        **extra_env,
    )
    return subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True, timeout=600)


def repo_ok(repo: Path, *cmd: str, **extra_env: str) -> str:
    result = repo_run(repo, *cmd, **extra_env)
    assert result.returncode == 0, f"{cmd}: {result.stdout}\n{result.stderr}"
    return result.stdout + result.stderr


@pytest.fixture(scope="session")
def dvc_project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A git + DVC repository holding a copy of the project with tiny params; tests that
    share it run the DAG in it (DVC's cache makes a second `dvc repro` a no-op)."""
    repo = tmp_path_factory.mktemp("repo")
    for name in ("agentrl", "stages", "flows"):
        shutil.copytree(ROOT / name, repo / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "dvc.yaml", repo)
    shutil.copy(ROOT / ".gitignore", repo)
    shutil.copy(ROOT / ".dvcignore", repo)
    write_params(repo / "params.yaml", dvc_project_params())
    repo_ok(repo, "git", "init", "-q")
    repo_ok(repo, "dvc", "init", "-q")
    repo_ok(repo, "dvc", "config", "core.analytics", "false")
    repo_ok(repo, "git", "add", "-A")
    repo_ok(repo, "git", "commit", "-qm", "init")
    return repo


def dvc_project_params() -> dict:
    """The params :func:`dvc_project` starts with (test_bitwise builds its clean clone
    with them, to compare it with that repository's first run)."""
    return project_params(max_steps=6, checkpoint_every=100)


@pytest.fixture(scope="session")
def first_repro(dvc_project: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """:func:`dvc_project`'s first `dvc repro` (the whole DAG): what it printed, and a
    directory holding a copy of the ``dvc.lock`` it wrote, kept before tests change params."""
    out = repo_ok(dvc_project, "dvc", "repro")
    kept = tmp_path_factory.mktemp("first_lock")
    shutil.copy(dvc_project / "dvc.lock", kept)
    return out, kept


def producer(uri: str, output: Path) -> str | None:
    """The MLflow run that wrote ``output``'s current content (its ``lineage.`` tag)."""
    import mlflow

    from agentrl.tracking import content_digest, producer_run

    mlflow.set_tracking_uri(uri)
    return producer_run(content_digest(output)[:32])


def python_tool(sandbox: Any = None) -> tuple[Any, Any, str, str]:
    """The python family's code tool bound to a fresh sample: (tools, box, tool name,
    name of its code argument). Close ``box`` when done; it opens the sandbox ``sandbox``
    names (a SandboxSpec; default: subprocess)."""
    from agentrl.config import SplitSection, TeacherSection
    from agentrl.envs.registry import Registry
    from agentrl.synth.sampler import Sampler
    from agentrl.tools.sandboxes import SandboxSpec

    registry = Registry(["agentrl.envs.families.python_exec:PythonEnv"])
    sampler = Sampler(registry, 0, TeacherSection())
    record = sampler.sample("sft", SplitSection(n=1), ["python"], 0).record
    tools, box = registry.bind(record["env"], sandbox or SandboxSpec())
    surface = record["env"]["surfaces"]["run_python"]
    return tools, box, surface["name"], surface["args"]["code"]


# A trivially learnable task for RL: answer 7 to "Pick a digit."; warm-started to answer a
# uniformly random digit, so a group of 8 holds a right answer about half the time.
DIGIT_PROMPT = "Pick a digit."


def digit_tasks(n: int, answer: int) -> list[dict]:
    env = {"family": "calculator", "state": {}, "surfaces": {}}
    return [
        {
            "id": f"digit-{i}",
            "env": env,
            "messages": [{"role": "user", "content": DIGIT_PROMPT}],
            "tools": [],
            "verifier": {"kind": "numeric", "answer": answer, "rtol": 0.0, "atol": 0.0},
        }
        for i in range(n)
    ]


def tiny_fit(
    dataset: Path, model_cfg: dict[str, Any], batch: Any, steps: int = 120
) -> tuple[Any, Any]:
    """A tiny model (``model_cfg``) and a tokenizer of ``dataset``'s sft split, trained on
    the assistant turns of ``batch(step)``: conversations of equal length, as (messages,
    tools) pairs."""
    import torch

    from agentrl.chat import get_format, render_ids, render_text
    from agentrl.config import ModelSection
    from agentrl.model.build import build_tiny
    from agentrl.model.tokenizer import train_tokenizer

    fmt = get_format("hermes")
    texts = [render_text(fmt, r["messages"], r["tools"])[0] for r in read_split(dataset, "sft")]
    tokenizer = train_tokenizer(texts, fmt, vocab_size=1024)
    torch.manual_seed(0)
    model = build_tiny(ModelSection(**model_cfg), tokenizer, seed=0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for step in range(steps):
        rendered = [render_ids(tokenizer, fmt, m, t) for m, t in batch(step)]
        ids = torch.tensor([r[0] for r in rendered])
        mask = torch.tensor([r[1] for r in rendered])
        logits = model(input_ids=ids).logits[:, :-1]
        loss = torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1), reduction="none"
        )
        loss = (loss * mask[:, 1:].reshape(-1)).sum() / mask[:, 1:].sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model, tokenizer


def digit_model(dataset: Path, model_cfg: dict[str, Any]) -> tuple[Any, Any]:
    """A tiny model trained to answer "Answer: D" to DIGIT_PROMPT, D uniformly random."""

    def batch(step: int) -> list[tuple[list[dict[str, Any]], None]]:
        digits = [(step * 7 + i) % 10 for i in range(20)]
        return [
            ([{"role": "user", "content": DIGIT_PROMPT},
              {"role": "assistant", "content": f"Answer: {d}"}], None)
            for d in digits
        ]  # fmt: skip

    return tiny_fit(dataset, model_cfg, batch)


class ScriptedEngine:
    """A control-flow policy: answers each prompt with the next text of its script,
    tokenized by the real tokenizer; records every id it hands out."""

    def __init__(self, tokenizer: Any, scripts: list[list[str]], stop: bool = True):
        self.tokenizer, self.scripts, self.stop = tokenizer, scripts, stop
        self.turn = [0] * len(scripts)
        self.emitted: list[list[list[int]]] = [[] for _ in scripts]
        self.prompts: dict[tuple[int, ...], int] = {}
        self.stop_id = tokenizer.convert_tokens_to_ids("<|im_end|>")  # as HFEngine names it

    def generate(self, prompts: list[list[int]], sampling: Any) -> list[Any]:
        from agentrl.harness.engine import Generation

        out = []
        for prompt in prompts:
            episode = self._episode(prompt)
            script = self.scripts[episode]
            text = script[min(self.turn[episode], len(script) - 1)]
            self.turn[episode] += 1
            ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
            ids = ids[: sampling.max_new_tokens - 1] + ([self.stop_id] if self.stop else [])
            self.emitted[episode].append(ids)
            out.append(Generation(ids, [-0.5] * len(ids), self.stop))
        return out

    def _episode(self, prompt: list[int]) -> int:
        # episodes are told apart by their first user turn, stable across turns
        for key, episode in self.prompts.items():
            if tuple(prompt[: len(key)]) == key:
                return episode
        key = tuple(prompt[: min(len(prompt), 400)])
        self.prompts[key] = len(self.prompts)
        return self.prompts[key]


def oracle_script(fmt: Any, record: dict[str, Any]) -> list[str]:
    """The texts of a record's expert turns, as a scripted engine writes them."""
    from agentrl.chat.render import render_assistant

    return [
        render_assistant(fmt, m).removesuffix("<|im_end|>")
        for m in record["messages"]
        if m["role"] == "assistant"
    ]
