"""Synthesis output: determinism, split disjointness, record format, sizes, failure modes."""

from __future__ import annotations

import filecmp
import json
from collections import Counter
from pathlib import Path

import pytest
from conftest import SMALL_SPLITS, read_split

from agentrl.config import SPLITS, TRAIN_SPLITS, SynthSection
from agentrl.envs.world import partition_of
from agentrl.synth.pipeline import SynthError, build_registry, synthesize
from agentrl.synth.report import summarize

EVAL = ["test", "heldout_tools", "heldout_compose", "long_horizon"]


def _synth(out: Path, **overrides) -> dict:
    cfg = SynthSection.model_validate_json(
        json.dumps({"splits": SMALL_SPLITS, "shard_size": 25} | overrides)
    )
    return synthesize(cfg, 7, out, build_registry(cfg), progress=False)


def _same_tree(a: Path, b: Path) -> bool:
    files_a = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    files_b = sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file())
    return files_a == files_b and all(filecmp.cmp(a / f, b / f, shallow=False) for f in files_a)


def test_same_params_same_bytes_for_any_worker_count(tmp_path: Path) -> None:
    one = _synth(tmp_path / "one", workers=1)
    _synth(tmp_path / "again", workers=1)
    two = _synth(tmp_path / "two", workers=2)
    assert _same_tree(tmp_path / "one", tmp_path / "again")
    assert _same_tree(tmp_path / "one", tmp_path / "two")
    assert summarize(one)["dvc"] == summarize(two)["dvc"]  # metrics/synth.json reproduces too
    _synth(tmp_path / "other", workers=1, heldout_tool_share=0.3)
    assert not _same_tree(tmp_path / "one", tmp_path / "other")


def test_every_split_is_written_with_its_size(dataset: Path) -> None:
    for split in SPLITS:
        records = read_split(dataset, split)
        expected = {
            "midtrain": 600 + SMALL_SPLITS["midtrain"]["copy_items"],
            "sft": 300,
            "rl": 200,
            "test": 200,
            "heldout_tools": 200,
            "heldout_compose": 80,
            "long_horizon": SMALL_SPLITS["long_horizon"]["n"],
        }[split]
        assert len(records) == expected, split
        assert len({r["id"] for r in records}) == len(records)
        assert {r["split"] for r in records} == {split}
    assert (
        len(list((dataset / "midtrain").glob("shard-*.jsonl"))) == 7
    )  # 610 records, 100 per shard


def test_records_follow_the_documented_format(dataset: Path) -> None:
    for record in read_split(dataset, "sft"):
        assert set(record) == {
            "id",
            "split",
            "family",
            "difficulty",
            "depth",
            "messages",
            "tools",
            "verifier",
            "env",
            "atoms",
            "meta",
        }
        roles = [m["role"] for m in record["messages"]]
        assert roles[0] == "user" and roles[-1] == "assistant"
        names = {t["function"]["name"] for t in record["tools"]}
        for message in record["messages"]:
            for call in message.get("tool_calls", []):
                assert isinstance(call["function"]["arguments"], dict)
                assert call["function"]["name"] in names or record["meta"]["recovery"]
            if message["role"] == "tool":
                assert message["tool_call_id"].startswith("call_")
        assert record["verifier"]["kind"] in {"exact", "numeric", "state"}
    rl = read_split(dataset, "rl")
    assert all([m["role"] for m in r["messages"]] == ["user"] for r in rl)
    assert all(r["env"]["state"] and r["verifier"] for r in rl)


def test_eval_worlds_share_no_atom_with_training(dataset: Path) -> None:
    train: dict[str, set] = {"entity": set(), "word": set(), "number": set()}
    for split in TRAIN_SPLITS:
        for record in read_split(dataset, split):
            for kind, values in record["atoms"].items():
                train[kind] |= set(values)
                assert all(partition_of(kind, v) == "train" for v in values)
    assert all(train.values())
    for split in EVAL:
        seen = 0
        for record in read_split(dataset, split):
            for kind, values in record["atoms"].items():
                assert not set(values) & train[kind], (split, kind)
                seen += len(values)
        assert seen > 0
    # and the eval entities really are absent from every training byte
    train_text = "".join(
        (dataset / s).joinpath(f).read_text()
        for s in TRAIN_SPLITS
        for f in sorted(p.name for p in (dataset / s).glob("*.jsonl"))
    )
    for record in read_split(dataset, "test")[:50]:
        for entity in record["atoms"]["entity"]:
            assert f'"{entity}"' not in train_text


def _surface_names(records: list[dict]) -> tuple[set[str], set[str]]:
    tools, args = set(), set()
    for record in records:
        for tool in record["tools"]:
            tools.add(tool["function"]["name"])
            args |= set(tool["function"]["parameters"]["properties"])
        for message in record["messages"]:  # names written in calls, mistakes included
            for call in message.get("tool_calls", []):
                tools.add(call["function"]["name"])
                args |= set(call["function"]["arguments"])
    return tools, args


def test_heldout_tools_use_names_no_training_split_uses(dataset: Path) -> None:
    train_tools, train_args = _surface_names(
        [r for s in TRAIN_SPLITS for r in read_split(dataset, s)]
    )
    held = read_split(dataset, "heldout_tools")
    held_tools, held_args = _surface_names(held)
    assert held_tools and held_args
    assert not held_tools & train_tools
    assert not held_args & train_args
    assert len({r["family"] for r in held}) == 6


def test_heldout_compose_is_deeper_than_any_training_task(dataset: Path) -> None:
    deepest = Counter()
    for split in TRAIN_SPLITS:
        for record in read_split(dataset, split):
            deepest[record["family"]] = max(deepest[record["family"]], record["depth"])
    for record in read_split(dataset, "heldout_compose"):
        assert record["depth"] > deepest[record["family"]], record["id"]


def test_long_horizon_exceeds_the_context(dataset: Path) -> None:
    for record in read_split(dataset, "long_horizon"):
        assert record["meta"]["approx_tokens"] >= 1024
        assert record["meta"]["turns"] >= 10


def test_curriculum_orders_easy_to_hard(dataset: Path) -> None:
    depths = [r["depth"] for r in read_split(dataset, "sft")]
    assert depths == sorted(depths) and depths[0] < depths[-1]


def test_recoveries_and_copy_items_are_present(dataset: Path) -> None:
    midtrain = read_split(dataset, "midtrain")
    assert sum(r["meta"]["recovery"] is not None for r in midtrain) > 0.15 * 600
    copies = [r for r in midtrain if r["family"] == "copy"]
    assert copies and all(
        r["messages"][0]["content"] == f"Repeat exactly: {r['messages'][1]['content']}"
        for r in copies
    )


def test_dedup_drops_repeats(tmp_path: Path) -> None:
    # one family, one knob value: the calculator's 1-op space is small enough to repeat
    splits = {
        "sft": {
            "n": 1500,
            "families": ["calculator"],
            "rename_prob": 0.0,
            "difficulty": {"num_tools": [1, 1]},
        }
    }
    stats = _synth(tmp_path, splits=splits, shard_size=1500)
    records = read_split(tmp_path, "sft")
    keys = {json.dumps(r["messages"]) for r in records}
    assert len(keys) == len(records) == 1500
    assert stats["sft"]["rejections"]["duplicate"] > 0
    assert stats["sft"]["attempts"] == 1500 + sum(stats["sft"]["rejections"].values())


def test_impossible_split_fails_with_the_reason(tmp_path: Path) -> None:
    splits = {"long_horizon": {"n": 5, "families": ["calculator"], "min_tokens": 100000}}
    with pytest.raises(
        SynthError, match=r"split 'long_horizon': 0 of 5 samples after 20 draws \(too_short=20\)"
    ):
        _synth(tmp_path, splits=splits)


def test_restart_practice_samples_train_as_two_faithful_contexts() -> None:
    from agentrl.chat import get_format, render_text
    from agentrl.config import SplitSection, TeacherSection
    from agentrl.envs.registry import Registry
    from agentrl.harness.context import SUMMARY_REQUEST
    from agentrl.model.tokenizer import train_tokenizer
    from agentrl.synth.sampler import Sampler
    from agentrl.train.data import build_examples

    split = SplitSection(n=1, summary_prob=1.0, difficulty={"ops": (3, 3)})
    sampler = Sampler(Registry(), 0, TeacherSection())
    records = [sampler.sample("sft", split, ["calculator"], i).record for i in range(4)]
    for record in records:
        before, after = record["contexts"]
        assert before[-2] == {"role": "user", "content": SUMMARY_REQUEST}
        summary = before[-1]["content"]
        seen = [m["content"] for m in before if m["role"] == "tool"]
        assert seen and all(o.strip() in summary for o in seen)  # exact values survive
        assert after[0]["content"].endswith(f"Progress so far:\n{summary}")
        calls = [m for m in record["messages"] if m["role"] == "assistant"]
        assert [m for m in before[:-1] + after[1:] if m["role"] == "assistant"] == calls
    fmt = get_format("hermes")
    tokenizer = train_tokenizer(
        [render_text(fmt, c, r["tools"])[0] for r in records for c in r["contexts"]], fmt, 600
    )
    examples, stats = build_examples(records, tokenizer, fmt, "assistant", 4096, "drop")
    assert stats.records == len(examples) == 2 * len(records)
