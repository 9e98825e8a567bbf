"""base.precision: resolved from the hardware, refused where bf16 would be emulated, and
what bf16 means: float32 masters and losses in training, a bf16 copy for rl rollouts that
follows every update, bf16 weights for generation."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import (
    PRECISIONS,
    ROOT,
    TINY_MODEL,
    digit_model,
    digit_tasks,
    small_params,
    stage_env,
    write_params,
)

from agentrl.chat import get_format
from agentrl.config import HarnessSection, ModelSection, RLSection, TrainSection
from agentrl.envs.registry import Registry
from agentrl.model.build import build_tiny
from agentrl.model.logprobs import causal_lm
from agentrl.model.tokenizer import train_tokenizer
from agentrl.precision import cpu_flags, generation_model, native_bf16, resolve
from agentrl.rl.trainer import RLTrainer
from agentrl.train.data import Example, collate, pack
from agentrl.train.loop import Trainer, lm_loss

BF16 = PRECISIONS[1]  # the bf16 case, skipped where the machine lacks native bf16


def test_cpu_flags_come_from_cpuinfo(tmp_path: Path) -> None:
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu sse avx512f avx512_bf16\n\nflags : other\n")
    assert cpu_flags(info) == {"fpu", "sse", "avx512f", "avx512_bf16"}
    assert cpu_flags(tmp_path / "absent") == frozenset()


def test_onednn_capped_below_bf16_counts_as_no_native_bf16(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    assert not native_bf16("cpu")
    assert resolve("auto", "cpu", native_bf16("cpu")) == "fp32"


# every entry point that runs the model refuses a forced bf16 before it writes anything
MODEL_ENTRY_POINTS = [
    [str(ROOT / "stages" / f"{stage}.py")] for stage in ("midtrain", "sft", "pivots", "rl", "eval")
] + [
    ["-m", "agentrl.cli", "rollout", "--model", "models/sft", "--out", "runs.jsonl"],
    ["-m", "agentrl.cli", "serve", "--model", "models/sft"],
]


@pytest.mark.parametrize(
    "entry", MODEL_ENTRY_POINTS, ids=["midtrain", "sft", "pivots", "rl", "eval", "rollout", "serve"]
)
def test_forced_bf16_without_native_bf16_is_one_line_and_exit_2(
    tmp_path: Path, entry: list[str]
) -> None:
    params = small_params()
    params["base"]["precision"] = "bf16"
    path = write_params(tmp_path / "params.yaml", params)
    done = subprocess.run(
        [sys.executable, *entry, "--params", str(path)], cwd=tmp_path,
        env=stage_env(ONEDNN_MAX_CPU_ISA="AVX2"), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr[-2000:]
    assert f"{path}: base.precision: 'bf16': bf16 needs native bfloat16" in lines[0], lines[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["params.yaml"]  # nothing written


def tiny_rows(tokenizer, n: int = 8) -> list:
    generator = torch.Generator().manual_seed(0)
    docs = [
        Example(torch.randint(10, len(tokenizer), (60,), generator=generator).tolist(), [1] * 60)
        for _ in range(n)
    ]
    return pack(docs, 128, 0, True)


@pytest.mark.parametrize("precision", [BF16])
def test_bf16_training_keeps_float32_masters_and_float32_losses(precision: str) -> None:
    tokenizer = train_tokenizer(
        ["hello world 123", "tool call answer"] * 20, get_format("hermes"), 300
    )
    model = build_tiny(ModelSection(**TINY_MODEL), tokenizer, seed=0)
    twin = copy.deepcopy(model)
    cfg = TrainSection(micro_batch_size=2, context=128, max_steps=3, warmup_steps=1, lr=1e-3)
    rows = tiny_rows(tokenizer)
    mixed = Trainer(cfg, model, tokenizer.pad_token_id, 0, "bf16", precision)
    plain = Trainer(cfg, twin, tokenizer.pad_token_id, 0, "fp32", "fp32")
    batch = collate(rows[:2], 128, tokenizer.pad_token_id)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss, _ = lm_loss(mixed.engine, batch, 64)
    reference, _ = lm_loss(plain.engine, batch, 64)
    assert loss.dtype == torch.float32
    assert abs(loss.item() - reference.item()) < 0.02 * reference.item(), (loss, reference)
    for trainer in (mixed, plain):
        history = trainer.train(rows, [], Path("/nonexistent"), lambda *_: None, progress=False)
        assert history.step == 3
    assert all(p.dtype == torch.float32 for p in mixed.engine.module.parameters())
    states = [s for s in mixed.optimizer.state.values() if "exp_avg" in s]
    assert states and all(s["exp_avg"].dtype == torch.float32 for s in states)
    moved = [
        float((a - b).abs().max())
        for a, b in zip(
            mixed.engine.module.parameters(), plain.engine.module.parameters(), strict=True
        )
    ]
    assert max(moved) < 5e-3, max(moved)  # three steps of lr 1e-3 land where float32's do


@pytest.mark.parametrize("precision", [BF16])
def test_rl_rollouts_run_a_bf16_copy_that_follows_every_update(
    dataset: Path, tmp_path: Path, precision: str
) -> None:
    fmt = get_format("hermes")
    model, tokenizer = digit_model(dataset, TINY_MODEL)
    cfg = RLSection(
        rollouts="episodes",
        steps=2, tasks_per_step=4, group_size=8, lr=2e-3, mini_batch=32, micro_batch_size=16,
        grounded_only=False, checkpoint_every=100, dynamic_sampling=False,
    )  # fmt: skip
    harness_cfg = HarnessSection(max_turns=1, max_new_tokens=8, context_limit=256)
    trainer = RLTrainer(cfg, harness_cfg, model, tokenizer, fmt, Registry(), 0, "copy", precision)
    policy, rollout = causal_lm(trainer.engine.module), trainer.rollout_engine.model
    assert rollout is not policy and rollout.dtype == torch.bfloat16
    assert policy.dtype == torch.float32
    before = {k: v.clone() for k, v in policy.state_dict().items()}
    _, history, _ = trainer.train(digit_tasks(4, answer=7), tmp_path / "ckpt", lambda *_: None)
    trainer.harness.close()
    after = policy.state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in after)  # the updates moved it
    for name, value in rollout.state_dict().items():
        torch.testing.assert_close(value, after[name].to(torch.bfloat16), atol=0, rtol=0)
    # the bf16 rollouts and the autocast trainer part by rounding only
    for h in history:
        assert h["rollout_train_logp_gap"] < 0.05 and 0.9 < h["is_weight_mean"] < 1.1, h


def test_generation_model_copies_only_when_the_dtype_differs() -> None:
    tokenizer = train_tokenizer(["hello world 123"] * 20, get_format("hermes"), 300)
    model = build_tiny(ModelSection(**TINY_MODEL), tokenizer, seed=0)
    assert generation_model(model, "fp32") is model
    half = generation_model(model, "bf16")
    assert half is not model and half.dtype == torch.bfloat16 and model.dtype == torch.float32
    assert generation_model(half, "bf16") is half
