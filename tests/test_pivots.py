"""Pivot states: candidates from expert trajectories, the local verifier of one turn,
one-turn rollouts through the harness, and the pivot rollout source inside a step."""

from __future__ import annotations

import copy
import json
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT, TINY_MODEL, digit_model, project_params, stage_env, write_params

from agentrl.chat import get_format
from agentrl.chat.render import render_assistant
from agentrl.config import HarnessSection, RLSection, SplitSection, TeacherSection, load_params
from agentrl.envs.registry import Registry
from agentrl.errors import StageError
from agentrl.harness.engine import HFEngine
from agentrl.harness.loop import Harness
from agentrl.rl.batch import to_sequences
from agentrl.rl.pivots import Pivot, PivotJudge, PivotRollouts, candidates
from agentrl.rl.profiling import PIVOTS_FILE, pivot_records, read_anchors, read_pivots
from agentrl.rl.rollouts import EpisodeRollouts, StepRollouts, rollout_figures
from agentrl.rl.sources import build_rollouts
from agentrl.rl.turn_reward import judge_turn
from agentrl.synth.sampler import Sampler
from agentrl.tools.sandboxes import SandboxSpec

FMT = get_format("hermes")


@pytest.fixture(scope="module")
def registry() -> Registry:
    return Registry()


def rl_record(registry: Registry, family: str, index: int = 0, **split: Any) -> dict[str, Any]:
    cfg = SplitSection.model_validate_json(json.dumps({"n": 1} | split))
    outcome = Sampler(registry, 5, TeacherSection()).sample("rl", cfg, [family], index)
    assert outcome.record is not None, outcome.reason
    return outcome.record


def call_text(name: str, arguments: dict[str, Any], times: int = 1) -> str:
    call = {"type": "function", "function": {"name": name, "arguments": arguments}}
    message = {"role": "assistant", "content": "Let me check.", "tool_calls": [call] * times}
    return render_assistant(FMT, message)


def pivots_stage(cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "stages" / "pivots.py")],
        cwd=cwd, env=stage_env(), capture_output=True, text=True, timeout=600,
    )  # fmt: skip


def judged(registry: Registry, pivot: Pivot, text: str) -> tuple[bool, str]:
    verdict = judge_turn(
        text, pivot.record, pivot.history, pivot.action, registry, FMT, SandboxSpec()
    )
    return verdict.success, verdict.reason


def test_rl_records_keep_the_expert_trajectory_apart_from_the_prompt(registry: Registry) -> None:
    record = rl_record(registry, "calculator")
    assert [m["role"] for m in record["messages"]] == ["user"]
    assert record["expert"][0] == record["messages"][0]
    assert record["expert"][-1]["content"].startswith("Answer: ")
    pivots = list(candidates([record]))
    assert [p.index for p in pivots] == [
        i for i, m in enumerate(record["expert"]) if m["role"] == "assistant"
    ]
    assert pivots[0].kind == "call" and pivots[-1].kind == "answer"
    assert pivots[0].history == record["messages"]  # the first turn starts from the prompt


def test_a_recovery_mistake_is_no_pivot(registry: Registry) -> None:
    record = rl_record(registry, "store", recovery_prob=1.0)
    mistake = record["meta"]["recovery"]["turn"]
    calls = [i for i, m in enumerate(record["expert"]) if m.get("tool_calls")]
    indices = [p.index for p in candidates([record])]
    assert calls[mistake] not in indices and calls[mistake + 1] in indices


def test_a_call_counts_when_it_is_the_experts_or_does_what_the_experts_did(
    registry: Registry,
) -> None:
    for index in range(50):  # a task of one commutative operation
        record = rl_record(registry, "calculator", index, difficulty={"ops": [1, 1]})
        pivot = next(p for p in candidates([record]) if p.kind == "call")
        expert = pivot.action["tool_calls"][0]["function"]
        name, (arg, expression) = expert["name"], next(iter(expert["arguments"].items()))
        left, op, right = expression.split(" ")
        if op in "+*":
            break
    assert judged(registry, pivot, call_text(name, {arg: expression.upper()})) == (
        True,
        "same_call",
    )
    swapped = call_text(name, {arg: f"{right}{op}{left}"})  # other text, the same result
    assert judged(registry, pivot, swapped) == (True, "same_observation")
    assert judged(registry, pivot, call_text(name, {arg: f"{expression} + 1"})) == (
        False,
        "other_observation",
    )
    assert judged(registry, pivot, call_text(name, {"wrong": expression}))[0] is False
    twice = call_text(name, {arg: expression}, times=2)
    assert judged(registry, pivot, twice) == (False, "several_calls")
    assert judged(registry, pivot, "Answer: 12") == (False, "answer_for_call")
    assert judged(registry, pivot, "<tool_call>\n{broken\n</tool_call>") == (False, "invalid_call")


def test_an_answer_is_judged_on_the_state_the_expert_left(registry: Registry) -> None:
    """A store task is verified on the inventory: the expert's calls are replayed before
    the answer is judged, so the state is the one the answer turn met."""
    record = rl_record(registry, "store", difficulty={"ops": [2, 3]})
    pivot = next(p for p in candidates([record]) if p.kind == "answer")
    assert judged(registry, pivot, pivot.action["content"]) == (True, "answer")
    assert judged(registry, pivot, "Answer: 987654") == (False, "wrong_answer")
    call = pivot.history[-2]["tool_calls"][0]["function"]
    assert judged(registry, pivot, call_text(call["name"], call["arguments"])) == (
        False,
        "call_for_answer",
    )


class Scripted:
    """An engine that writes the given texts in turn (a scripted policy), token-exact."""

    def __init__(self, tokenizer: Any, texts: list[str]):
        self.tokenizer, self.texts, self.calls = tokenizer, texts, 0

    def generate(self, prompts: list[list[int]], sampling: Any) -> list[Any]:
        from agentrl.harness.engine import Generation

        out = []
        stop = self.tokenizer.convert_tokens_to_ids("<|im_end|>")
        for _ in prompts:
            text = self.texts[self.calls % len(self.texts)]
            self.calls += 1
            ids = self.tokenizer(text, add_special_tokens=False)["input_ids"] + [stop]
            out.append(Generation(ids, [-0.5] * len(ids), True))
        return out


def test_one_turn_rollouts_train_on_the_sampled_turn_alone(
    dataset: Path, registry: Registry
) -> None:
    _, tokenizer = digit_model(dataset, TINY_MODEL)
    record = rl_record(registry, "calculator")
    pivot = next(p for p in candidates([record]) if p.kind == "answer")
    answer = pivot.action["content"]
    harness = Harness(
        Scripted(tokenizer, [answer, "Answer: 0"]), tokenizer, FMT, registry,
        HarnessSection(max_new_tokens=32, context_limit=1024),
    )  # fmt: skip
    episodes = harness.one_turn([pivot.state()], samples=2, seed=0)
    PivotJudge(registry, FMT, harness.sandbox)(episodes, [pivot, pivot])
    assert [e.success for e in episodes] == [True, False]
    assert [e.end_reason for e in episodes] == ["turn", "turn"]
    (sequence, _) = to_sequences(episodes, [[1.0], [-1.0]])
    segment = episodes[0].segments[0]
    trained = [t for t, m in zip(sequence.ids, sequence.mask, strict=True) if m]
    assert tokenizer.decode(trained) == answer + "<|im_end|>"
    assert sum(segment.loss_mask[: segment.prompt_len]) == 0
    assert set(v for v, m in zip(sequence.advantages, sequence.mask, strict=True) if m) == {1.0}
    harness.close()


def test_pivot_groups_are_drawn_scored_retired_and_resumed_inside_a_mixed_step(
    dataset: Path, registry: Registry
) -> None:
    model, tokenizer = digit_model(dataset, TINY_MODEL)
    records = [rl_record(registry, "calculator", i) for i in range(6)]
    pool = [p for p in candidates(records) if p.kind == "answer"]
    cfg = RLSection(
        tasks_per_step=4, group_size=4, rollouts="mix", pivot_share=0.5, grounded_only=False,
        max_resample=1,
    )  # fmt: skip
    harness_cfg = HarnessSection(max_turns=1, max_new_tokens=16, context_limit=1024)
    engine = HFEngine(model, tokenizer)
    harness = Harness(engine, tokenizer, FMT, registry, harness_cfg)
    judge = PivotJudge(registry, FMT, harness.sandbox)

    def step_rollouts() -> tuple[StepRollouts, PivotRollouts]:
        rng = random.Random(3)
        pivots = PivotRollouts(cfg, harness, judge, pool, 7, rng)
        episodes = EpisodeRollouts(cfg, harness, 7, rng)
        return StepRollouts(cfg, [(episodes, 2), (pivots, 2)]), pivots

    rollouts, pivots = step_rollouts()
    data = rollouts.collect(records, step=0)
    figures = rollout_figures(data)
    assert figures["pivots_groups_drawn"] >= 2 and figures["episodes_groups_drawn"] >= 2
    assert figures["pivots_groups_kept"] + figures["episodes_groups_kept"] == data.groups
    assert (
        data.sources["pivots"].drawn
        == data.sources["pivots"].zero_variance
        + len([e for e in data.episodes if e.end_reason == "turn"]) // cfg.group_size
    )
    assert len(pivots.retired) == data.sources["pivots"].zero_variance  # flat groups retire
    saved = copy.deepcopy(rollouts.state())
    following = rollouts.collect(records, step=1)
    again, _ = step_rollouts()
    again.restore(saved)
    resumed = again.collect(records, step=1)
    assert [e.task_id for e in resumed.drawn_episodes] == [
        e.task_id for e in following.drawn_episodes
    ]
    assert resumed.drawn_rewards == following.drawn_rewards
    harness.close()


def test_anchor_groups_are_drawn_as_their_own_source_and_never_retired(
    dataset: Path, registry: Registry
) -> None:
    """rl.anchor_share: answer states drawn beside the kept pivots; a flat anchor group is
    dropped like any group without signal but stays in view for later steps."""
    model, tokenizer = digit_model(dataset, TINY_MODEL)
    records = [rl_record(registry, "calculator", i) for i in range(4)]
    states = list(candidates(records))
    calls = [p for p in states if p.kind == "call"]
    answers = [p for p in states if p.kind == "answer"]
    cfg = RLSection(
        tasks_per_step=2, group_size=2, rollouts="pivots", anchor_share=0.5, grounded_only=False,
        max_resample=1,
    )  # fmt: skip
    harness_cfg = HarnessSection(max_turns=1, max_new_tokens=8, context_limit=1024)
    harness = Harness(HFEngine(model, tokenizer), tokenizer, FMT, registry, harness_cfg)
    judge = PivotJudge(registry, FMT, harness.sandbox)
    rollouts = build_rollouts(cfg, harness, 7, random.Random(3), 0, 1, calls, judge, answers)
    data = rollouts.collect(records, step=0)
    sources = {source.name: source for source, _ in rollouts.parts}
    assert set(sources) == set(data.sources) == {"pivots", "anchors"}
    assert rollout_figures(data)["anchors_groups_drawn"] == data.sources["anchors"].drawn >= 1
    anchor_ids = {p.id for p in answers}
    drawn = [e.task_id for e in data.drawn_episodes]
    assert sum(t in anchor_ids for t in drawn) == data.sources["anchors"].drawn * cfg.group_size
    # a random tiny model passes no turn: every group is flat
    assert data.groups == 0 and len(sources["pivots"].retired) == data.sources["pivots"].drawn
    assert sources["anchors"].retired == set()
    harness.close()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"pivots": {"split": "test"}}, "pivots.split: Input should be 'midtrain', 'sft' or 'rl'"),
        ({"pivots": {"max_pass_rate": 0.0}}, "pivots.max_pass_rate: Input should be greater than 0"),
        ({"pivots": {"min_pass_rate": 0.75, "max_pass_rate": 0.5}}, "pivots: Value error, min_pass_rate 0.75 is above max_pass_rate 0.5"),
        ({"rl": {"pivot_share": 1.5}}, "rl.pivot_share: Input should be less than or equal to 1"),
        ({"rl": {"anchor_share": -0.5}}, "rl.anchor_share: Input should be greater than or equal to 0"),
        ({"pivots": {"split": "midtrain"}, "synth": {"splits": {"midtrain": {"n": 0}}}}, "pivots.split: 'midtrain' has no trajectories"),
    ],
)  # fmt: skip
def test_bad_pivot_params_exit_2_naming_the_key(
    tmp_path: Path, change: dict[str, Any], message: str
) -> None:
    params = project_params()
    for section, values in change.items():
        if section == "synth":
            params["synth"]["splits"]["midtrain"]["n"] = 0
        else:
            params[section] = params.get(section, {}) | values
    write_params(tmp_path / "params.yaml", params)
    result = pivots_stage(tmp_path)
    assert result.returncode == 2, result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert "params.yaml" in line and message in line
    assert not (tmp_path / "data" / "pivots").exists()


def test_a_split_without_trajectories_is_refused_before_loading(tmp_path: Path) -> None:
    """Records synthesised before rl kept its trajectories hold the prompt only."""
    shard = tmp_path / "data" / "synth" / "rl" / "shard-00000.jsonl"
    shard.parent.mkdir(parents=True)
    record = {"id": "rl-0", "messages": [{"role": "user", "content": "hi"}], "tools": []}
    shard.write_text(json.dumps(record) + "\n")
    write_params(tmp_path / "params.yaml", project_params())
    result = pivots_stage(tmp_path)
    assert result.returncode == 2, result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert "pivots.split: 'rl'" in line and "no expert trajectories" in line
    assert not (tmp_path / "data" / "pivots").exists()


def test_pivot_tasks_are_spread_over_a_split_written_in_curriculum_order(tmp_path: Path) -> None:
    """The rl split holds one-call tasks first: the pivots' tasks must span its depths."""
    expert = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "Answer: 1"}]
    records = [{"id": f"rl-{i}", "depth": 1 + i // 6, "expert": expert} for i in range(12)]
    shard = tmp_path / "data" / "synth" / "rl" / "shard-00000.jsonl"
    shard.parent.mkdir(parents=True)
    shard.write_text("".join(json.dumps(r) + "\n" for r in records))
    params = project_params()
    params["base"]["paths"]["data"] = str(tmp_path / "data")
    chosen = pivot_records(load_params(write_params(tmp_path / "params.yaml", params)))
    assert [r["depth"] for r in chosen] == [1, 1, 2, 2]  # pivots.tasks: 4 of 12


def test_the_rl_stage_selects_pivots_by_pass_rate_at_its_own_threshold(tmp_path: Path) -> None:
    """The profile stores pass rates; which pivots rl draws follows the band
    (pivots.min_pass_rate, max_pass_rate) when rl loads them, not the kept column written
    at profiling time."""
    records = [{"id": "t0"}, {"id": "t1"}]
    rows = [
        {"pivot": "t0@1", "task": "t0", "index": 1, "kind": "call", "pass_rate": 0.5},
        {"pivot": "t0@3", "task": "t0", "index": 3, "kind": "answer", "pass_rate": 0.875},
        {"pivot": "t1@1", "task": "t1", "index": 1, "kind": "call", "pass_rate": 1.0},
        {"pivot": "t1@3", "task": "t1", "index": 3, "kind": "answer", "pass_rate": 0.0},
    ]
    (tmp_path / PIVOTS_FILE).write_text(
        "".join(json.dumps(r | {"kept": r["pass_rate"] == 0.5}) + "\n" for r in rows)
    )
    assert [p.index for p in read_pivots(tmp_path, records, (0.0, 0.75))] == [1]
    assert [p.index for p in read_pivots(tmp_path, records, (0.0, 1.0))] == [1, 3]
    assert [p.index for p in read_pivots(tmp_path, records, (0.75, 1.0))] == [3]
    with pytest.raises(
        StageError, match=r"no pivot has a pass rate in \(0, 1\) and in \[0.0, 0.25\]"
    ):
        read_pivots(tmp_path, records, (0.0, 0.25))
    # anchors: the answer states the band leaves out, whatever their pass rate
    assert [p.id for p in read_anchors(tmp_path, records, (0.0, 0.75))] == ["t0@3", "t1@3"]
    assert [p.id for p in read_anchors(tmp_path, records, (0.0, 1.0))] == ["t1@3"]
    (tmp_path / PIVOTS_FILE).write_text(json.dumps(rows[0] | {"kept": True}) + "\n")
    with pytest.raises(StageError, match=r"no answer state outside the kept pivots"):
        read_anchors(tmp_path, records, (0.0, 0.75))
