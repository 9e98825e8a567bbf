"""Eval metric math on hand-built episodes, the eval.json layout, and eval params checks."""

from __future__ import annotations

import json

import pytest
from conftest import project_params, write_params

from agentrl.config import ConfigError, load_params
from agentrl.eval.score import score
from agentrl.eval.suite import Cell, nest
from agentrl.harness.records import Episode, TurnStats
from agentrl.report.build import cells_of


def episode(
    task: str, sample: int, grounded: bool, success: bool, errors: dict, calls: int
) -> Episode:
    turns = [TurnStats(10, calls, errors, 0, False, 5), TurnStats(4, 0, {}, 0, False, 30)]
    return Episode(task, sample, [], [], turns=turns, success=success, grounded=grounded,
                   reward=float(grounded))  # fmt: skip


def test_score_rates_intervals_pass_at_k_and_call_figures() -> None:
    episodes = [
        # task a: 1 of 2 grounded; task b: 0 of 2 (one ungrounded success)
        episode("a", 0, True, True, {}, 2),
        episode("a", 1, False, False, {"parse_error": 1}, 2),
        episode("b", 0, False, True, {"tool_error": 1}, 2),
        episode("b", 1, False, False, {"unknown_tool": 1, "timeout": 1}, 2),
    ]
    m = score(episodes, [1, 2, 4])
    assert m["episodes"] == 4 and m["tasks"] == 2
    assert m["success"] == 0.5 and m["grounded_success"] == 0.25
    assert 0 < m["grounded_success_low"] < 0.25 < m["grounded_success_high"] < 1
    assert m["pass_at_1"] == 0.25 and m["pass_at_2"] == 0.5  # (1 + 0) / 2 tasks
    assert "pass_at_4" not in m  # more than the 2 samples per task
    assert m["tool_calls"] == 8
    assert m["tool_call_validity"] == 0.75  # parse_error + unknown_tool of 8
    assert m["tool_error_rate"] == round(2 / 6, 4)  # tool_error + timeout of 6 valid
    assert m["turns"] == 2 and m["tokens_per_episode"] == 14 and m["reward"] == 0.25
    with pytest.raises(ValueError):
        score([], [1])


def test_metrics_always_nest_checkpoint_variant_split_and_read_back(tmp_path) -> None:
    params = load_params(write_params(tmp_path / "params.yaml", project_params()))
    cells = [Cell(c, v, s, {"grounded_success": 0.0}, [])
             for c in ("midtrain", "sft", "rl") for v in ("sampled", "summary")
             for s in (("test",) if v == "sampled" else ("long_horizon",))]  # fmt: skip
    nested = nest(cells)
    assert set(nested["sft"]) == {"sampled", "summary"}
    assert set(nested["sft"]["summary"]) == {"long_horizon"}
    assert len(cells_of(nested, params)) == len(cells)
    one = nest([c for c in cells if c.variant == "sampled"])  # one variant: the same shape
    assert set(one["rl"]) == {"sampled"} and set(one["rl"]["sampled"]) == {"test"}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"pass_k": [1, 8], "samples": 4}, "pass_k 8 > samples 4"),
        ({"variants": [{"name": "a"}, {"name": "a"}]}, "variant names repeat"),
        (
            {"variants": [{"name": "x", "harness": {"context": "fold"}}]},
            "variant 'x': harness.context",
        ),
        ({"variants": [{"name": "x", "harness": {"temprature": 0}}]}, "harness.temprature"),
        ({"checkpoints": ["final"]}, "eval.checkpoints.0"),
        ({"bfcl": {"categories": ["live_simple"]}}, "eval.bfcl.categories.0"),
    ],
)
def test_bad_eval_params_name_the_key(tmp_path, change: dict, message: str) -> None:
    params = project_params()
    params["eval"] |= change
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        load_params(write_params(tmp_path / "params.yaml", params))


def test_eval_and_report_name_what_is_missing(tmp_path) -> None:
    from agentrl.errors import StageError
    from agentrl.eval.run import eval_stage
    from agentrl.report.run import report_stage

    params = project_params()
    params["base"]["paths"] = {k: str(tmp_path / k) for k in params["base"]["paths"]}
    loaded = load_params(write_params(tmp_path / "params.yaml", params))
    with pytest.raises(StageError, match=r"models/midtrain: no model .*'midtrain'"):
        eval_stage(loaded)
    with pytest.raises(StageError, match=r"metrics/eval.json: missing"):
        report_stage(loaded)
    assert not (tmp_path / "metrics").exists() and not (tmp_path / "reports").exists()


def _cell(checkpoint: str, variant: str, split: str, solved: list[bool]) -> Cell:
    outcomes = {(f"t{i}", 0): ok for i, ok in enumerate(solved)}
    return Cell(checkpoint, variant, split, {"grounded_success": sum(solved) / len(solved)}, [],
                outcomes=outcomes)  # fmt: skip


def test_each_checkpoint_is_paired_with_the_one_before_it_task_by_task() -> None:
    from agentrl.eval.suite import paired

    sft = [True] * 100 + [False] * 100
    rl = [True] * 100 + [True] * 30 + [False] * 70  # 30 tasks won, none lost
    cells = [_cell("sft", "greedy", "test", sft), _cell("rl", "greedy", "test", rl),
             _cell("sft", "greedy", "heldout_tools", sft),
             _cell("rl", "greedy", "heldout_tools", sft[::-1])]  # fmt: skip
    out = paired(cells, ["sft", "rl"])
    better = out["rl-sft"]["greedy"]["test"]
    assert (better["won"], better["lost"], better["pairs"], better["verdict"]) == (
        30, 0, 200, "better",
    )  # fmt: skip
    assert better["low"] > 0 and better["difference"] == 0.15
    swapped = out["rl-sft"]["greedy"]["heldout_tools"]  # same rate, every task changed
    assert swapped["difference"] == 0 and swapped["verdict"] == "no measurable difference"
    assert swapped["won"] == swapped["lost"] == 100
    assert set(paired(cells, ["midtrain", "sft", "rl"])) == {"rl-sft"}  # midtrain not run


def test_eval_refuses_more_tasks_than_a_split_holds_or_turns_than_it_allows(tmp_path) -> None:
    from agentrl.config import EvalSection, HarnessSection
    from agentrl.eval.suite import check_cells

    split = tmp_path / "eval" / "test"
    split.mkdir(parents=True)
    lines = [{"id": "a", "meta": {"turns": 3}}, {"id": "b", "meta": {"turns": 9}}]
    (split / "shard-00000.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    harness = HarnessSection(max_turns=6)
    fits = EvalSection(variants=[{"name": "g", "splits": ["test"], "harness": {"max_turns": 9}}])
    check_cells(fits.model_copy(update={"tasks": 2}), harness, tmp_path, "params.yaml")
    too_many = EvalSection(variants=[{"name": "g", "splits": ["test"], "tasks": 3}])
    with pytest.raises(ConfigError, match=r"params.yaml: eval.variants.g.tasks: 3 tasks of test"):
        check_cells(too_many, harness, tmp_path, "params.yaml")
    short = EvalSection(variants=[{"name": "g", "splits": ["test"]}], tasks=2)
    with pytest.raises(
        ConfigError,
        match=r"params.yaml: harness.max_turns: 6, but test's expert trajectories take up to 9",
    ):
        check_cells(short, harness, tmp_path, "params.yaml")
    just_one = short.model_copy(update={"tasks": 1})  # the 9-turn task is not run
    check_cells(just_one, harness, tmp_path, "params.yaml")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"tasks": 16},
            r"eval.tasks: 16 tasks of \w+ \(variant 'sampled'\), but synth.splits",
        ),
        (
            {"variants": [{"name": "g", "splits": ["long_horizon"], "tasks": 6}]},
            "eval.variants.g.tasks: 6 tasks of long_horizon",
        ),
    ],
)
def test_eval_cells_must_fit_the_splits_synth_writes(tmp_path, change: dict, message: str) -> None:
    params = project_params()
    params["eval"] |= change
    with pytest.raises(ConfigError, match=message):
        load_params(write_params(tmp_path / "params.yaml", params))
    del params["synth"]["splits"]["long_horizon"]
    params["eval"]["tasks"] = 2
    with pytest.raises(ConfigError, match=r"'long_horizon' is not among synth\.splits"):
        load_params(write_params(tmp_path / "params.yaml", params))


def test_the_report_opens_with_the_paired_verdicts(tmp_path) -> None:
    from agentrl.eval.suite import nest, paired
    from agentrl.report.build import paired_table

    params = load_params(write_params(tmp_path / "params.yaml", project_params()))
    sft = [True] * 100 + [False] * 100
    cells = [_cell("sft", "sampled", "test", sft),
             _cell("rl", "sampled", "test", [False] * 40 + sft[40:])]  # fmt: skip
    metrics = nest(cells) | {"paired": paired(cells, ["sft", "rl"])}
    metrics["bfcl"] = {"sft": {"simple": {"accuracy": 0.4}}, "rl": {"simple": {"accuracy": 0.4}},
                       "rl-sft": {"simple": {"difference": 0.0, "low": -0.05, "high": 0.05,
                                             "won": 3, "lost": 3, "pairs": 100,
                                             "verdict": "no measurable difference"}}}  # fmt: skip
    lines = paired_table(metrics, params)
    assert lines[0].startswith("## Did training help? (sft → rl)")
    rows = [line for line in lines if line.startswith("| sampled") or line.startswith("| BFCL")]
    assert "sft 0.500" in rows[0] and "rl 0.300" in rows[0] and "**rl worse**" in rows[0]
    assert "0 / 40 / 200" in rows[0]
    assert "**no measurable difference**" in rows[1]


def test_the_report_counts_first_faults_per_split_commonest_first() -> None:
    from agentrl.eval.failures import breakdown
    from agentrl.report.build import fault_table

    sft = breakdown(["grounded"] * 9 + ["wrong_value"] * 137 + ["answered_early"] * 54)
    rl = breakdown(["grounded"] * 23 + ["wrong_value"] * 120 + ["answered_early"] * 57)
    cells = [
        {"checkpoint": c, "variant": v, "split": s, "metrics": {"first_fault": f}}
        for v in ("greedy", "sampled")  # a split's first variant only: the headline
        for c, f in (("sft", sft), ("rl", rl))
        for s in ("heldout_compose", "test")
    ]
    cells.append({"checkpoint": "rl", "variant": "greedy", "split": "heldout_tools", "metrics": {}})
    cells += [{"checkpoint": c, "variant": "summary", "split": "long_horizon",
               "metrics": {"first_fault": sft}} for c in ("sft", "rl")]  # fmt: skip
    lines = fault_table(cells)
    assert lines[0] == "## What went wrong first"
    header = next(line for line in lines if line.startswith("| split"))
    assert header.startswith(
        "| split | variant | checkpoint | wrong_value | answered_early | grounded |"
    )
    rows = [line for line in lines if line.startswith(("| test", "| held", "| long"))]
    assert [r.split(" | ")[:3] for r in rows] == [
        ["| test", "greedy", "sft"], ["| test", "greedy", "rl"],
        ["| heldout_compose", "greedy", "sft"], ["| heldout_compose", "greedy", "rl"],
        ["| long_horizon", "summary", "sft"], ["| long_horizon", "summary", "rl"],
    ]  # fmt: skip
    assert rows[3].startswith("| heldout_compose | greedy | rl | 120 | 57 | 23 |")
    assert fault_table([cells[8]]) == []  # the older eval's cell
