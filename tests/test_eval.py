"""Eval metric math on hand-built episodes, the eval.json layout, and eval params checks."""

from __future__ import annotations

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
