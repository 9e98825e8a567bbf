"""Training: packing boundaries and masks on a real tiny model; the midtrain/sft stages as
subprocesses, with resume after a real SIGKILL and a two-process ZeRO-2 run."""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml
from conftest import ROOT, TINY_MODEL, free_port, project_params, stage_env, write_params
from transformers import AutoModelForCausalLM, AutoTokenizer

from agentrl.chat import get_format, render_ids
from agentrl.config import ModelSection
from agentrl.model.build import build_tiny
from agentrl.model.logprobs import head_logprobs
from agentrl.model.tokenizer import train_tokenizer
from agentrl.train.data import Example, build_examples, collate, pack


def stage(
    project: Path, name: str, *launcher: str, params: str = "params.yaml", **popen
) -> subprocess.Popen:
    cmd = [
        *(launcher or (sys.executable,)),
        str(ROOT / "stages" / f"{name}.py"),
        "--params",
        params,
    ]
    env = stage_env(MLFLOW_TRACKING_URI=f"sqlite:///{project / 'mlflow.db'}", OMP_NUM_THREADS="1")
    return subprocess.Popen(
        cmd,
        cwd=project,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        **popen,
    )


def finish(proc: subprocess.Popen, timeout: int = 600) -> str:
    out, _ = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, out[-3000:]
    return out


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project dir with synthesized data and models/base (tiny), made by the real stages."""
    root = tmp_path_factory.mktemp("project")
    params = project_params()
    write_params(root / "params.yaml", params)
    finish(stage(root, "synth"))
    finish(stage(root, "init"))
    return root


def variant(project: Path, name: str, **midtrain) -> str:
    """A params file whose outputs go to ``*_<name>`` dirs, sharing data and models/base."""
    params = yaml.safe_load((project / "params.yaml").read_text())
    params["midtrain"] |= midtrain
    params["base"]["paths"] |= {
        k: f"{k}_{name}" for k in ("models", "checkpoints", "metrics", "plots")
    }
    write_params(project / f"params_{name}.yaml", params)
    (project / f"models_{name}").mkdir(exist_ok=True)
    os.symlink(project / "models" / "base", project / f"models_{name}" / "base")
    return f"params_{name}.yaml"


def test_overlong_samples_split_into_pieces_that_keep_every_token(project: Path) -> None:
    from conftest import read_split

    tokenizer = AutoTokenizer.from_pretrained(project / "models" / "base")
    fmt = get_format("hermes")
    records = read_split(project / "data" / "synth", "midtrain")[:20]
    whole, _ = build_examples(records, tokenizer, fmt, "all", 100_000, "drop")
    context = sorted(len(e.ids) for e in whole)[len(whole) // 2]  # half are longer
    dropped, drop_stats = build_examples(records, tokenizer, fmt, "all", context, "drop")
    split, split_stats = build_examples(records, tokenizer, fmt, "all", context, "split")
    assert (
        drop_stats.dropped_overlong == split_stats.split > 0 and split_stats.dropped_overlong == 0
    )
    assert all(len(e.ids) <= context for e in split)
    assert [t for e in split for t in e.ids] == [t for e in whole for t in e.ids]
    assert split_stats.tokens == sum(len(e.ids) for e in whole) > drop_stats.tokens
    assert len(split) > len(whole) > len(dropped)


def test_packing_keeps_documents_apart() -> None:
    examples = [
        Example(list(range(1, 8)), [1] * 7),
        Example(list(range(10, 15)), [1] * 5),
        Example([20, 21, 22], [0, 1, 1]),
    ]
    rows = pack(examples, context=16, seed=0, packing=True)
    assert len(rows) == 1 and len(rows[0].ids) == 15
    batch = collate(rows, context=16, pad_id=0)
    docs = rows[0].docs
    mask = batch["attention_mask"][0, 0]
    for i in range(15):
        for j in range(16):
            assert bool(mask[i, j]) == (j <= i and docs[j] == docs[i])
        if i == 0 or docs[i] != docs[i - 1]:
            assert batch["position_ids"][0, i] == 0 and batch["labels"][0, i] == -100
    assert batch["pad_tokens"] == 1
    assert bool(mask[15, 15])  # padding attends to itself (no empty softmax rows)


def test_packed_forward_equals_separate_forwards() -> None:
    tokenizer = train_tokenizer(
        ["hello world 123", "tool call answer"] * 20, get_format("hermes"), 300
    )
    model = build_tiny(
        ModelSection.model_validate_json(json.dumps(TINY_MODEL)), tokenizer, seed=0
    ).eval()
    a, b = list(range(5, 25)), list(range(30, 41))
    rows = pack(
        [Example(a, [1] * len(a)), Example(b, [1] * len(b))], context=40, seed=0, packing=True
    )
    batch = collate(rows, 40, tokenizer.pad_token_id)
    with torch.no_grad():
        packed = model(
            input_ids=batch["input_ids"],
            attention_mask=batch["attention_mask"],
            position_ids=batch["position_ids"],
        ).logits[0]
        alone = {len(x): model(input_ids=torch.tensor([x])).logits[0] for x in (a, b)}
    offset = 0
    for doc in (a, b) if rows[0].ids[0] == a[0] else (b, a):
        assert torch.allclose(packed[offset : offset + len(doc)], alone[len(doc)], atol=1e-5)
        offset += len(doc)


def test_head_runs_only_where_kept_with_the_full_heads_values_and_gradients() -> None:
    tokenizer = train_tokenizer(["hello world 123"] * 20, get_format("hermes"), 300)
    model = build_tiny(ModelSection(**TINY_MODEL), tokenizer, seed=0)
    hidden = torch.randn(3, 17, TINY_MODEL["hidden_size"], requires_grad=True)
    targets = torch.randint(0, len(tokenizer), (3, 17))
    keep = torch.rand(3, 17) < 0.3

    def run(**kept: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        hidden.grad = None
        logp, entropy = head_logprobs(model, hidden, targets, chunk=4, **kept)
        (logp * keep).sum().backward()
        return logp, entropy, hidden.grad.clone()

    full, only = run(), run(keep=keep)
    torch.testing.assert_close(only[0], full[0] * keep, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(only[1], full[1] * keep, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(only[2], full[2], atol=1e-5, rtol=1e-5)


def test_sft_labels_only_assistant_tokens(project: Path) -> None:
    from conftest import read_split

    tokenizer = AutoTokenizer.from_pretrained(project / "models" / "base")
    fmt = get_format("hermes")
    records = read_split(project / "data" / "synth", "sft")[:5]
    examples, stats = build_examples(records, tokenizer, fmt, "assistant", 100_000, "drop")
    assert stats.dropped_overlong == 0
    for example, record in zip(examples, records, strict=True):
        _, mask = render_ids(tokenizer, fmt, record["messages"], record["tools"])
        assert example.loss_mask == mask
        targets = tokenizer.decode(
            [t for t, m in zip(example.ids, example.loss_mask, strict=True) if m]
        )
        assert "<tool_response>" not in targets and record["messages"][0]["content"] not in targets
    assert stats.records == 5


def test_midtrain_resumes_after_sigkill(project: Path) -> None:
    ckpt = project / "checkpoints" / "midtrain"
    proc = stage(project, "midtrain")
    deadline = time.time() + 300
    while not (ckpt / "agentrl_meta.json").exists():
        assert proc.poll() is None, proc.stdout.read()[-2000:]
        assert time.time() < deadline
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    killed_at = json.loads((ckpt / "agentrl_meta.json").read_text())["step"]
    assert 10 <= killed_at < 40
    assert not (project / "models" / "midtrain").exists()  # nothing half-written
    out = finish(stage(project, "midtrain"))
    resumed_from = int(re.search(r"midtrain: 40 steps, resumed from step (\d+)", out)[1])
    assert resumed_from >= killed_at
    steps = [
        int(line.split("\t")[0])
        for line in (project / "plots" / "midtrain.tsv").read_text().splitlines()[1:]
    ]
    assert steps == list(range(5, 41, 5))  # the history survived the kill
    resumed = AutoModelForCausalLM.from_pretrained(project / "models" / "midtrain").state_dict()

    # the same run without a kill ends in the same weights
    finish(stage(project, "midtrain", params=variant(project, "fresh")))
    fresh = AutoModelForCausalLM.from_pretrained(project / "models_fresh" / "midtrain").state_dict()
    assert all(torch.allclose(resumed[k], fresh[k], atol=1e-6) for k in fresh)


def test_sft_writes_a_loadable_model_and_format_metrics(project: Path) -> None:
    if not (project / "models" / "midtrain").exists():
        finish(stage(project, "midtrain"))
    finish(stage(project, "sft"))
    model = AutoModelForCausalLM.from_pretrained(project / "models" / "sft")
    tokenizer = AutoTokenizer.from_pretrained(project / "models" / "sft")
    assert model.config.vocab_size == len(tokenizer) and tokenizer.chat_template
    metrics = json.loads((project / "metrics" / "sft.json").read_text())
    for split in ("test", "heldout_tools"):
        scores = metrics["format_check"][split]
        assert (
            scores["samples"] == 8
            and 0 <= scores["first_call_exact"] <= scores["tool_call_validity"] <= 1
        )


def test_two_process_zero2_run(project: Path) -> None:
    zero2 = variant(project, "zero2", zero_stage=2, max_steps=6, checkpoint_every=100)

    def midtrain_runs() -> int:
        with sqlite3.connect(project / "mlflow.db") as db:
            return db.execute("select count(*) from runs where name = 'midtrain'").fetchone()[0]

    before = midtrain_runs()
    torchrun = str(Path(sys.executable).parent / "torchrun")
    launcher = (
        torchrun,
        "--nproc_per_node",
        "2",
        "--master_addr",
        "127.0.0.1",
        "--master_port",
        str(free_port()),
    )
    out = finish(stage(project, "midtrain", *launcher, params=zero2))
    metrics = json.loads((project / "metrics_zero2" / "midtrain.json").read_text())
    assert metrics["steps"] == 6, out[-2000:]
    assert AutoModelForCausalLM.from_pretrained(project / "models_zero2" / "midtrain") is not None
    assert midtrain_runs() == before + 1  # rank 0 alone tracks


@pytest.mark.parametrize(
    ("breakage", "message", "code"),
    [  # a model that is not usable fails the same way every time: exit 2, like bad params
        ("missing_model", "models/base: model directory not found", 2),
        ("corrupt_model", "config.json is missing", 2),
        ("no_format_tokens", "tokenizer lacks the 'xml' format tokens", 2),
        ("empty_data", "the split is empty", 1),
    ],
)
def test_bad_inputs_fail_clearly(
    project: Path, tmp_path: Path, breakage: str, message: str, code: int
) -> None:
    params = yaml.safe_load((project / "params.yaml").read_text())
    params["base"]["paths"] = {
        k: str(tmp_path / k)
        for k in ("data", "models", "metrics", "plots", "reports", "checkpoints")
    }
    (tmp_path / "data").mkdir()
    (tmp_path / "models").mkdir()
    os.symlink(project / "data" / "synth", tmp_path / "data" / "synth")
    if breakage == "corrupt_model":
        (tmp_path / "models" / "base").mkdir()
    if breakage == "no_format_tokens":
        params["model"]["format"] = "xml"
        os.symlink(project / "models" / "base", tmp_path / "models" / "base")
    if breakage == "empty_data":
        os.unlink(tmp_path / "data" / "synth")
        (tmp_path / "data" / "synth" / "midtrain").mkdir(parents=True)
        (tmp_path / "data" / "synth" / "midtrain" / "shard-00000.jsonl").write_text("")
        os.symlink(project / "models" / "base", tmp_path / "models" / "base")
    write_params(tmp_path / "params.yaml", params)
    proc = stage(tmp_path, "midtrain", params=str(tmp_path / "params.yaml"))
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == code, out[-2000:]
    assert message in out and "Traceback" not in out
    assert (
        not (tmp_path / "models" / "midtrain").exists()
        and not (tmp_path / "metrics" / "midtrain.json").exists()
    )


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("context", 4096, "midtrain.context: 4096 exceeds the 512 positions"),
        ("families", ["weather"], "midtrain.families: no record of ['weather'] in"),
    ],
)
def test_config_that_cannot_train_is_a_config_error(
    project: Path, tmp_path: Path, key: str, value: object, message: str
) -> None:
    params = yaml.safe_load((project / "params.yaml").read_text())
    params["midtrain"][key] = value
    params["base"]["paths"] |= {
        "models": str(project / "models"),
        "data": str(project / "data"),
        "metrics": str(tmp_path / "metrics"),
        "checkpoints": str(tmp_path / "ckpt"),
    }
    write_params(tmp_path / "params.yaml", params)
    proc = stage(tmp_path, "midtrain", params=str(tmp_path / "params.yaml"))
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 2, out[-2000:]
    assert f"{tmp_path / 'params.yaml'}: {message}" in out
    assert not (tmp_path / "metrics").exists()
