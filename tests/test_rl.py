"""The RL loop for real: a tiny model learns a trivially learnable task through the harness,
the verifier, group advantages and PPO on DeepSpeed; the rl stage resumes after SIGKILL."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml
from conftest import (
    PRECISIONS,
    ROOT,
    TINY_MODEL,
    digit_model,
    digit_tasks,
    project_params,
    read_split,
    stage_env,
    write_params,
)
from safetensors.torch import load_file

from agentrl.chat import get_format, render_ids, render_text
from agentrl.config import HarnessSection, ModelSection, RLSection
from agentrl.envs.registry import Registry
from agentrl.harness.engine import HFEngine
from agentrl.harness.loop import Harness
from agentrl.model.build import build_tiny
from agentrl.model.tokenizer import train_tokenizer
from agentrl.rl.batch import (
    TrainSequence,
    collate,
    shared_token_logprobs,
    to_sequences,
)
from agentrl.rl.trainer import RLTrainer


def success_rate(model, tokenizer, fmt, tasks, samples: int) -> float:
    cfg = HarnessSection(max_turns=1, max_new_tokens=8, context_limit=256)
    harness = Harness(HFEngine(model, tokenizer), tokenizer, fmt, Registry(), cfg)
    episodes = harness.run(tasks, samples=samples, seed=99)
    harness.close()
    return sum(e.reward for e in episodes) / len(episodes)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_rl_raises_the_reward_of_a_trivially_learnable_task(
    dataset: Path, tmp_path: Path, precision: str
) -> None:
    fmt = get_format("hermes")
    model, tokenizer = digit_model(dataset, TINY_MODEL)
    tasks = digit_tasks(4, answer=7)
    before = success_rate(model, tokenizer, fmt, tasks, 32)
    assert 0.02 <= before <= 0.3, before
    cfg = RLSection(
        rollouts="episodes",
        steps=12, tasks_per_step=4, group_size=8, lr=2e-3, mini_batch=32, micro_batch_size=16,
        grounded_only=False, checkpoint_every=100, epochs=2,
    )  # fmt: skip
    harness_cfg = HarnessSection(max_turns=1, max_new_tokens=8, context_limit=256)
    trainer = RLTrainer(cfg, harness_cfg, model, tokenizer, fmt, Registry(), 0, "digits", precision)
    steps, history, resumed = trainer.train(tasks, tmp_path / "ckpt", lambda *_: None)
    trainer.harness.close()
    after = success_rate(trainer.engine.module, tokenizer, fmt, tasks, 32)
    assert steps == 12 and resumed == 0 and len(history) == 12
    assert after >= before + 0.3, (before, after, [h.get("reward_mean") for h in history])
    assert all(h["time_update_s"] > 0 for h in history if "time_update_s" in h)


def test_rollouts_at_a_temperature_train_on_its_logprobs_and_drift_is_tracked(
    dataset: Path, tmp_path: Path
) -> None:
    """At harness.temperature 0.7 the trainer's log-probs are those of softmax(logits/0.7),
    the distribution the engine sampled from: the rollout/train gap stays at numerical
    noise (log-probs at T = 1 would differ by ~0.1 a token). track_drift logs the policy's
    distance from the start model: nothing before the first update, more after."""
    fmt = get_format("hermes")
    model, tokenizer = digit_model(dataset, TINY_MODEL)
    cfg = RLSection(
        rollouts="episodes",
        steps=3, tasks_per_step=4, group_size=8, lr=2e-3, mini_batch=32, micro_batch_size=16,
        grounded_only=False, checkpoint_every=100, dynamic_sampling=False, track_drift=True,
    )  # fmt: skip
    harness_cfg = HarnessSection(max_turns=1, max_new_tokens=8, context_limit=256, temperature=0.7)
    trainer = RLTrainer(cfg, harness_cfg, model, tokenizer, fmt, Registry(), 0, "temp", "fp32")
    _, history, _ = trainer.train(digit_tasks(4, answer=7), tmp_path / "ckpt", lambda *_: None)
    trainer.harness.close()
    assert all(h["rollout_train_logp_gap"] < 1e-4 for h in history), history
    assert abs(history[0]["kl_to_start"]) < 1e-4 and history[0]["logprob_change"] < 1e-4
    assert history[-1]["logprob_change"] > 100 * max(history[0]["logprob_change"], 1e-6)


def test_first_mini_batch_reads_old_logprobs_off_its_own_forward_pass(dataset: Path) -> None:
    """On-policy shortcut: the first mini-batch trains on the rollout weights, so its
    detached forward pass must equal the separate no-grad pass it replaces."""
    fmt = get_format("hermes")
    texts = [render_text(fmt, r["messages"], r["tools"])[0] for r in read_split(dataset, "sft")]
    tokenizer = train_tokenizer(texts, fmt, vocab_size=1024)
    model = build_tiny(ModelSection(**TINY_MODEL), tokenizer, seed=1)
    cfg = RLSection(
        rollouts="episodes", tasks_per_step=2, group_size=4, mini_batch=4, micro_batch_size=4
    )
    harness_cfg = HarnessSection(max_turns=1, max_new_tokens=12, context_limit=256)
    trainer = RLTrainer(cfg, harness_cfg, model, tokenizer, fmt, Registry(), 0, "shortcut", "fp32")
    episodes = trainer.harness.run(digit_tasks(2, answer=7), samples=4, seed=3)
    trainer.harness.close()
    per_turn = [[1.0] * len(e.turns) for e in episodes]
    separate = trainer.policy_update.logprobs(
        trainer.engine.module, to_sequences(episodes, per_turn)
    )
    shortcut = to_sequences(episodes, per_turn)
    trainer.engine.train()
    trainer.policy_update.micro_loss(shortcut[:4])
    for seq, expected in zip(shortcut[:4], separate[:4], strict=True):
        assert seq.old_logp is not None
        torch.testing.assert_close(torch.tensor(seq.old_logp), expected, atol=1e-5, rtol=0)
    assert all(seq.old_logp is None for seq in shortcut[4:])


def test_shared_prompt_forward_gives_the_full_forwards_logprobs_and_gradients(
    dataset: Path,
) -> None:
    fmt = get_format("hermes")
    records = read_split(dataset, "sft")
    texts = [render_text(fmt, r["messages"], r["tools"])[0] for r in records]
    tokenizer = train_tokenizer(texts, fmt, vocab_size=1024)
    model = build_tiny(ModelSection(**TINY_MODEL), tokenizer, seed=2)
    sequences = []
    for record in records[:3]:  # 3 prompts x 3 samples of different lengths, 1 loner
        prompt = render_ids(tokenizer, fmt, record["messages"][:1], record["tools"], True)[0]
        for k in range(3 if record is not records[2] else 1):
            turn, reply = [7 + k] * (5 + 3 * k), [20 + k] * 4  # a tool reply: no target
            ids = prompt + turn + reply + turn
            mask = [0] * len(prompt) + [1] * len(turn) + [0] * len(reply) + [1] * len(turn)
            sequences.append(TrainSequence(ids, mask, [0.0] * len(ids), [1.0] * len(ids)))
    mask = collate(sequences, tokenizer.pad_token_id)["mask"]
    loners = [0, 3, 6]  # no prompt shared: the plain forward pass

    def full_logits(batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """The plain reference: every position's full-vocabulary logits at once."""
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
        logp_all = torch.log_softmax(logits.logits[:, :-1].float(), -1)
        taken = logp_all.gather(-1, batch["input_ids"][:, 1:, None])[..., 0]
        entropy = -(logp_all.exp() * logp_all).sum(-1).detach()
        zero = torch.zeros_like(taken[:, :1])
        return torch.cat([zero, taken], 1), torch.cat([zero, entropy], 1)

    def run(shared: bool, chunk: int) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
        model.zero_grad()
        if shared:
            logp, entropy = shared_token_logprobs(model, sequences, tokenizer.pad_token_id, chunk)
        else:
            logp, entropy = full_logits(collate(sequences, tokenizer.pad_token_id))
        (logp * mask).sum().backward()
        return logp * mask, entropy * mask, [p.grad.clone() for p in model.parameters()]

    plain = run(False, 0)
    for chunk in (3, 4096):  # several checkpointed chunks, and one
        shared = run(True, chunk)
        torch.testing.assert_close(shared[0], plain[0], atol=2e-5, rtol=0)
        torch.testing.assert_close(shared[1], plain[1], atol=2e-5, rtol=0)
        for a, b in zip(shared[2], plain[2], strict=True):
            torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-3)
    alone = [sequences[i] for i in loners]
    logp, entropy = shared_token_logprobs(model, alone, tokenizer.pad_token_id, 3)
    alone_mask = collate(alone, tokenizer.pad_token_id)["mask"]
    plain_logp, plain_entropy = full_logits(collate(alone, tokenizer.pad_token_id))
    torch.testing.assert_close(logp, plain_logp * alone_mask, atol=2e-5, rtol=0)
    torch.testing.assert_close(entropy, plain_entropy * alone_mask, atol=2e-5, rtol=0)


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """synth + init by the real stages; models/sft is the tiny base model."""
    root = tmp_path_factory.mktemp("rlproject")
    params = project_params()
    params["rl"] |= {"steps": 4, "checkpoint_every": 1, "dynamic_sampling": False}
    write_params(root / "params.yaml", params)
    for name in ("synth", "init"):
        done = subprocess.run(
            [sys.executable, str(ROOT / "stages" / f"{name}.py")],
            cwd=root, env=stage_env(), capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    os.symlink(root / "models" / "base", root / "models" / "sft")
    return root


def rl_stage(root: Path, params: str = "params.yaml") -> subprocess.Popen:
    env = stage_env(MLFLOW_TRACKING_URI=f"sqlite:///{root / 'mlflow.db'}", OMP_NUM_THREADS="1")
    return subprocess.Popen(
        [sys.executable, str(ROOT / "stages" / "rl.py"), "--params", params],
        cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,
    )  # fmt: skip


def test_rl_stage_resumes_after_sigkill_to_the_same_weights(project: Path) -> None:
    params = yaml.safe_load((project / "params.yaml").read_text())
    params["base"]["paths"] |= {
        "models": "models_ref",
        "checkpoints": "ckpt_ref",
        "metrics": "m_ref",
        "plots": "p_ref",
    }
    write_params(project / "params_ref.yaml", params)
    (project / "models_ref").mkdir()
    os.symlink(project / "models" / "sft", project / "models_ref" / "sft")
    out, _ = rl_stage(project, "params_ref.yaml").communicate(timeout=600)
    assert (project / "m_ref" / "rl.json").is_file(), out[-3000:]

    proc = rl_stage(project)
    meta = project / "checkpoints" / "rl" / "agentrl_meta.json"
    deadline = time.time() + 600
    # kill at the first checkpoint: three steps left, so the kill lands mid-run
    while not (meta.is_file() and json.loads(meta.read_text())["step"] >= 1):
        assert proc.poll() is None, proc.communicate()[0][-3000:]
        assert time.time() < deadline
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (project / "models" / "rl").exists()
    out, _ = rl_stage(project).communicate(timeout=600)
    found = re.search(r"rl: 4 steps, resumed from step (\d+)", out)
    assert found and 1 <= int(found[1]) < 4, out[-3000:]
    resumed = load_file(project / "models" / "rl" / "model.safetensors")
    reference = load_file(project / "models_ref" / "rl" / "model.safetensors")
    assert all(torch.equal(resumed[k], reference[k]) for k in reference)

    def figures(path: Path) -> list[tuple[str, ...]]:
        lines = [line.split("\t") for line in path.read_text().splitlines()]
        keep = [lines[0].index(c) for c in ("step", "reward_mean", "policy_loss", "entropy")]
        return [tuple(row[i] for i in keep) for row in lines[1:]]

    assert figures(project / "plots" / "rl.tsv") == figures(project / "p_ref" / "rl.tsv")


def test_rl_stage_trains_on_a_mix_of_episodes_and_pivot_states(project: Path) -> None:
    """rl.rollouts mix reads the kept rows of data/pivots (written here as a profile that
    kept every call of four of the pivot tasks and passed every answer), draws anchors from
    the answers under rl.anchor_share, and reports each source's groups every step."""
    from agentrl.rl.pivots import candidates
    from agentrl.rl.profiling import spread

    params = yaml.safe_load((project / "params.yaml").read_text())
    split = read_split(project / "data" / "synth", params["pivots"]["split"])
    records = spread(split, params["pivots"]["tasks"])[:4]
    rows = [
        {"pivot": p.id, "task": p.record["id"], "index": p.index, "kind": p.kind,
         "pass_rate": 0.5 if p.kind == "call" else 1.0, "kept": p.kind == "call"}
        for p in candidates(records)
    ]  # fmt: skip
    (project / "pv").mkdir()
    (project / "pv" / "pivots.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    params["base"]["paths"] |= {
        "models": "models_mix", "checkpoints": "ckpt_mix", "metrics": "m_mix", "plots": "p_mix",
    }  # fmt: skip
    params["base"]["paths"]["data"] = "data"
    params["rl"] |= {
        "rollouts": "mix", "tasks_per_step": 3, "pivot_share": 0.67, "anchor_share": 0.5,
        "steps": 2,
    }  # fmt: skip
    write_params(project / "params_mix.yaml", params)
    (project / "models_mix").mkdir()
    os.symlink(project / "models" / "sft", project / "models_mix" / "sft")
    (project / "data" / "pivots").symlink_to(project / "pv")
    out, _ = rl_stage(project, "params_mix.yaml").communicate(timeout=600)
    assert (project / "models_mix" / "rl" / "model.safetensors").is_file(), out[-3000:]
    lines = [line.split("\t") for line in (project / "p_mix" / "rl.tsv").read_text().splitlines()]
    table = [dict(zip(lines[0], row, strict=True)) for row in lines[1:]]
    assert [float(r["pivots_groups_drawn"]) for r in table] == [1.0, 1.0]
    assert [float(r["episodes_groups_drawn"]) for r in table] == [1.0, 1.0]
    assert [float(r["anchors_groups_drawn"]) for r in table] == [1.0, 1.0]


def test_two_ranks_roll_out_their_own_tasks_and_train_one_model(project: Path) -> None:
    """torchrun, two processes, ZeRO-2 on gloo: each rank rolls out other tasks, the
    all-reduced update leaves both with the same weights after every step, and rank 0
    alone writes the outputs and the MLflow run. The policy is the digit model on digit
    tasks, so groups carry a learning signal; dynamic sampling drops the flat ones, so the
    ranks train on unequal numbers of episodes (none, on some steps)."""
    import sqlite3

    from conftest import free_port

    params = yaml.safe_load((project / "params.yaml").read_text())
    params["rl"] |= {
        "steps": 3, "tasks_per_step": 4, "group_size": 4, "zero_stage": 2,
        "checkpoint_every": 100, "grounded_only": False, "lr": 2e-3, "dynamic_sampling": True,
    }  # fmt: skip
    params["harness"] |= {"max_turns": 1, "max_new_tokens": 8, "context_limit": 256}
    params["base"]["paths"] |= {
        k: f"{k}_ranks" for k in ("data", "models", "checkpoints", "metrics", "plots")
    }
    write_params(project / "params_ranks.yaml", params)
    model, tokenizer = digit_model(project / "data" / "synth", TINY_MODEL)
    model.save_pretrained(project / "models_ranks" / "sft")
    tokenizer.save_pretrained(project / "models_ranks" / "sft")
    tasks = digit_tasks(16, answer=7)
    (project / "data_ranks" / "synth" / "rl").mkdir(parents=True)
    (project / "data_ranks" / "synth" / "rl" / "shard-00000.jsonl").write_text(
        "".join(json.dumps(t) + "\n" for t in tasks)
    )
    database = project / "mlflow.db"

    def rl_runs() -> int:
        if not database.exists():
            return 0
        with sqlite3.connect(database) as db:
            return db.execute("select count(*) from runs where name = 'rl'").fetchone()[0]

    before = rl_runs()
    torchrun = str(Path(sys.executable).parent / "torchrun")
    done = subprocess.run(
        [
            torchrun, "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
            "--master_port", str(free_port()), str(ROOT / "tests" / "rl_ranks_probe.py"),
            "params_ranks.yaml", "probe",
        ],
        cwd=project, capture_output=True, text=True, timeout=600,
        env=stage_env(MLFLOW_TRACKING_URI=f"sqlite:///{database}", OMP_NUM_THREADS="1"),
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    ranks = [json.loads((project / "probe" / f"rank{r}.json").read_text()) for r in (0, 1)]
    tasks = [[t for call in rank["tasks"] for t in call] for rank in ranks]
    assert len(tasks[0]) == len(tasks[1]) == 3 * 2  # two tasks a step each
    for step in range(3):
        assert not set(ranks[0]["tasks"][step]) & set(ranks[1]["tasks"][step])
    trained = [rank["trained"] for rank in ranks]
    assert trained[0] != trained[1], trained  # uneven mini-batch counts ran in step
    assert ranks[0]["weights"] == ranks[1]["weights"]  # the start and after each update
    assert len(ranks[0]["weights"]) == 1 + 3 and len(set(ranks[0]["weights"])) > 1
    metrics = json.loads((project / "metrics_ranks" / "rl.json").read_text())
    assert metrics["steps"] == 3 and (project / "models_ranks" / "rl" / "config.json").is_file()
    plot = (project / "plots_ranks" / "rl.tsv").read_text().splitlines()
    assert len(plot) == 1 + 3
    assert rl_runs() == before + 1  # rank 0 alone tracks
    assert done.stdout.count("rl: 3 steps, resumed from step 0") == 1


def test_tasks_that_do_not_divide_over_the_ranks_are_refused_before_loading(
    project: Path,
) -> None:
    params = yaml.safe_load((project / "params.yaml").read_text())
    params["rl"] |= {"tasks_per_step": 3}
    write_params(project / "params_odd.yaml", params)
    done = subprocess.run(
        [sys.executable, str(ROOT / "stages" / "rl.py"), "--params", "params_odd.yaml"],
        cwd=project, env=stage_env(WORLD_SIZE="2"), capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    out = done.stdout + done.stderr
    assert done.returncode == 2, out[-2000:]
    assert "params_odd.yaml: rl.tasks_per_step: 3 does not divide over 2 ranks" in out, out
    assert "Traceback" not in out and "rl: " not in done.stdout  # nothing loaded


def test_an_unreachable_rollout_server_fails_the_stage_with_exit_3(project: Path) -> None:
    from conftest import free_port

    params = yaml.safe_load((project / "params.yaml").read_text())
    url = f"http://127.0.0.1:{free_port()}"
    params["harness"] |= {"engine": "openai", "engine_url": url, "engine_reload": "vllm"}
    params["base"]["paths"] |= {"models": "models_down", "checkpoints": "ckpt_down"}
    write_params(project / "params_down.yaml", params)
    (project / "models_down").mkdir()
    os.symlink(project / "models" / "sft", project / "models_down" / "sft")
    proc = rl_stage(project, "params_down.yaml")
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 3, out[-2000:]  # a server that may be starting: the flow retries
    assert f"error: harness.engine_url {url}: POST /collective_rpc: cannot reach" in out, out[
        -2000:
    ]
    assert "Traceback" not in out
    assert not (project / "models_down" / "rl").exists()


def test_running_ahead_needs_an_engine_in_its_own_process() -> None:
    from agentrl.config import ConfigError

    cfg = RLSection(max_staleness=1)  # refused before any model is touched
    with pytest.raises(ConfigError, match=r"rl\.max_staleness: 1 with harness\.engine: hf: "):
        RLTrainer(
            cfg, HarnessSection(), None, None, get_format("hermes"), Registry(), 0, "", "fp32"
        )


def test_collect_scales_advantages_over_the_steps_groups(dataset: Path) -> None:
    """Advantages come from one call over every kept group: ``batch`` whitens the
    group-centred rewards over the whole step, ``group`` divides each group by its std."""
    import copy
    from statistics import fmean, pstdev, stdev

    fmt = get_format("hermes")
    model, tokenizer = digit_model(dataset, TINY_MODEL)
    harness_cfg = HarnessSection(max_turns=1, max_new_tokens=8, context_limit=256)
    data = {}
    for scale in ("group", "batch"):
        cfg = RLSection(
            rollouts="episodes",
            tasks_per_step=4, group_size=8, grounded_only=False, dynamic_sampling=False,
            overlong="keep", scale=scale, advantage="grpo",
        )  # fmt: skip
        trainer = RLTrainer(
            cfg, harness_cfg, copy.deepcopy(model), tokenizer, fmt, Registry(), 0, "s", "fp32"
        )
        data[scale] = trainer.collect(digit_tasks(4, answer=7), step=0)
        trainer.harness.close()
    group, batch = data["group"], data["batch"]
    assert group.rewards == batch.rewards and group.groups == batch.groups == 4
    groups = [group.rewards[g * 8 : (g + 1) * 8] for g in range(4)]
    assert any(len(set(g)) > 1 for g in groups), groups  # some signal to scale
    centred = [r - fmean(g) for g in groups for r in g]
    whitened = [(a - fmean(centred)) / pstdev(centred) for a in centred]
    assert [t[0] for t in batch.per_turn] == pytest.approx(whitened)
    by_group = [
        (r - fmean(g)) / (stdev(g) + 1e-6) if len(set(g)) > 1 else 0.0 for g in groups for r in g
    ]
    assert [t[0] for t in group.per_turn] == pytest.approx(by_group)
    assert by_group != pytest.approx(whitened)  # the flat groups' zeros count in the batch
