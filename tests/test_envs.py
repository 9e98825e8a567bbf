"""Every family: the oracle's trajectory passes all verification layers, and each layer
rejects the failure it exists for."""

from __future__ import annotations

import copy
import json
import random

import pytest

from agentrl.config import SplitSection
from agentrl.envs.registry import Registry
from agentrl.envs.world import World
from agentrl.synth import verification
from agentrl.synth.sampler import Sampler

FAMILIES = ["calculator", "knowledge_base", "doc_search", "store", "convert", "compose"]


@pytest.fixture(scope="module")
def registry() -> Registry:
    return Registry()


@pytest.fixture(scope="module")
def sampler(registry: Registry) -> Sampler:
    from agentrl.config import TeacherSection

    return Sampler(registry, 3, TeacherSection())


def _record(sampler: Sampler, family: str, index: int = 0, **split) -> dict:
    cfg = SplitSection.model_validate_json(json.dumps({"n": 1, "rename_prob": 1.0} | split))
    outcome = sampler.sample("sft", cfg, [family], index)
    assert outcome.record is not None, outcome.reason
    return outcome.record


@pytest.mark.parametrize("family", FAMILIES)
def test_oracle_trajectories_pass_every_layer(
    sampler: Sampler, registry: Registry, family: str
) -> None:
    for index in range(15):
        record = _record(
            sampler, family, index, difficulty={"hops": [1, 3], "ops": [1, 3], "horizon": [1, 4]}
        )
        assert verification.check(registry, record) is None
        assert record["messages"][-1]["content"].startswith("Answer: ")


def _calls_under(
    sampler: Sampler, registry: Registry, family: str, index: int, thoughts: str
) -> tuple[dict, list[dict]]:
    """The call messages of one deep episode written under ``thoughts``, checked to pass
    verification and to make the same calls as the brief episode: only the words differ."""
    deep = {"hops": [1, 3], "ops": [1, 3], "horizon": [1, 4]}
    brief = _record(sampler, family, index, difficulty=deep)
    record = _record(sampler, family, index, difficulty=deep, thoughts=thoughts)
    assert verification.check(registry, record) is None
    calls = [m for m in record["messages"] if m.get("tool_calls")]
    assert [m["tool_calls"] for m in calls] == [
        m["tool_calls"] for m in brief["messages"] if m.get("tool_calls")
    ]
    return record, calls


@pytest.mark.parametrize("family", FAMILIES)
def test_plan_thoughts_count_down_the_steps_of_the_same_episode(
    sampler: Sampler, registry: Registry, family: str
) -> None:
    for index in range(10):
        _, calls = _calls_under(sampler, registry, family, index, "plan")
        left = [
            m["content"].count("; ") + 1 if "Left after this" in m["content"] else 0 for m in calls
        ]
        assert calls[-1]["content"].endswith("This is the last step.")
        assert left == list(range(len(calls) - 1, -1, -1)), [m["content"] for m in calls]


@pytest.mark.parametrize("family", ["calculator", "knowledge_base", "compose"])
def test_restated_tasks_shrink_by_one_step_and_carry_each_observation(
    sampler: Sampler, registry: Registry, family: str
) -> None:
    for index in range(10):
        record, calls = _calls_under(sampler, registry, family, index, "restate")
        rests = [m["content"].split("Left: ", 1)[1].split(". ", 1)[0] for m in calls]
        steps = [r.count(", then ") + r.count(" of ") for r in rests]
        assert steps == list(range(len(calls), 0, -1)), rests
        observed = [m["content"] for m in record["messages"] if m["role"] == "tool"]
        for rest, seen in zip(rests[1:], observed, strict=False):
            assert seen in rest, (rest, seen)  # what the last call found, filled in


@pytest.mark.parametrize("family", FAMILIES)
def test_recovery_trajectories_show_a_real_error_then_the_fix(
    sampler: Sampler, registry: Registry, family: str
) -> None:
    record = _record(sampler, family, recovery_prob=1.0)
    recovery = record["meta"]["recovery"]
    assert recovery is not None
    tool_messages = [m for m in record["messages"] if m["role"] == "tool"]
    assert tool_messages[recovery["turn"]]["content"].startswith("Error:")
    assert verification.check(registry, record) is None


def test_tampered_observation_fails_execution(sampler: Sampler, registry: Registry) -> None:
    record = _record(sampler, "calculator")
    copy_ = copy.deepcopy(record)
    next(m for m in copy_["messages"] if m["role"] == "tool")["content"] = "999999"
    assert verification.check(registry, copy_) == "execution"


def test_wrong_final_answer_fails_answer(sampler: Sampler, registry: Registry) -> None:
    record = copy.deepcopy(_record(sampler, "knowledge_base"))
    record["messages"][-1]["content"] = "Answer: Nobody"
    assert verification.check(registry, record) == "answer"


def test_answer_not_read_from_tools_is_ungrounded(sampler: Sampler, registry: Registry) -> None:
    record = copy.deepcopy(_record(sampler, "calculator"))
    record["messages"] = [
        record["messages"][0],
        record["messages"][-1],
    ]  # right answer, no tool call
    assert verification.check(registry, record) == "ungrounded"


def test_invalid_call_fails_format(sampler: Sampler, registry: Registry) -> None:
    record = copy.deepcopy(_record(sampler, "store"))
    call = next(m for m in record["messages"] if m.get("tool_calls"))["tool_calls"][0]["function"]
    call["arguments"] = {"bogus": 1}
    assert verification.check(registry, record) == "format"
    record = copy.deepcopy(_record(sampler, "store"))
    record["messages"][-1]["content"] = "I am done."
    assert verification.check(registry, record) == "format"


def test_store_is_verified_on_final_state(sampler: Sampler, registry: Registry) -> None:
    record = copy.deepcopy(_record(sampler, "store", difficulty={"horizon": [3, 3]}))
    first = next(m for m in record["messages"] if m.get("tool_calls"))
    tool = next(m for m in record["messages"] if m["role"] == "tool")
    # skip the first operation: observations no longer replay and the state is wrong
    record["messages"].remove(first)
    record["messages"].remove(tool)
    assert verification.check(registry, record) in {"execution", "answer"}


def test_knowledge_base_has_lookalike_distractors(registry: Registry) -> None:
    env = registry.envs["knowledge_base"]
    task = env.sample(random.Random(1), World(random.Random(1), "train"), {"hops": 2})
    names = list(task.state["facts"])
    start = task.state["start"]
    close = [
        n
        for n in names
        if n != start
        and len(n) == len(start)
        and sum(a != b for a, b in zip(n, start, strict=True)) == 1
    ]
    assert close, names
    box = env.bind(task.state)
    assert start in box.search_entities(start)


def test_doc_search_uses_bm25_ranking(registry: Registry) -> None:
    env = registry.envs["doc_search"]
    task = env.sample(random.Random(5), World(random.Random(5), "train"), {})
    box = env.bind(task.state)
    hits = box.search_documents(task.state["title"])
    assert hits[0]["title"] == task.state["title"]
