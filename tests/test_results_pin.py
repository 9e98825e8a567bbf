"""Results that span sessions (the screen, the study) pair every run against one sft: they
pin its digest and the CPU that made it, and stop on another."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, small_params, write_params

sys.path.insert(0, str(ROOT / "bench"))
from rl_study import profile_pivots, report, split_variants, stale_splits
from study_runs import pin_sft, start_key


def test_results_pin_their_sft_and_stop_on_another(tmp_path: Path) -> None:
    sft = tmp_path / "sft"
    sft.mkdir()
    (sft / "model.safetensors").write_bytes(b"one")
    pin: dict = {}
    pin_sft(pin, sft, tmp_path / "study.json")
    assert set(pin) == {"digest", "cpu"} and pin["cpu"]
    pin_sft(pin, sft, tmp_path / "study.json")  # the same sft: on it goes
    (sft / "chat_template.jinja").write_text("{{ messages }}")  # read by no rollout
    pin_sft(pin, sft, tmp_path / "study.json")
    (sft / "model.safetensors").write_bytes(b"two")
    with pytest.raises(SystemExit, match=r"study.json: sft.digest: .* made on .*, this is "):
        pin_sft(pin, sft, tmp_path / "study.json")


def test_a_study_with_pivot_rollouts_refuses_another_profile_than_the_dags(
    tmp_path: Path,
) -> None:
    """The runs draw the DAG's data/pivots: a --set that would need another profile stops
    before anything runs; the band, which rl applies to the stored pass rates, does not."""
    params = write_params(tmp_path / "params.yaml", small_params() | {"rl": {"rollouts": "mix"}})
    with pytest.raises(SystemExit, match=r"--set pivots.tasks=64: .* change it there"):
        profile_pivots(params, {"pivots.min_pass_rate": 0.0, "pivots.tasks": 64})


def test_a_study_scores_each_split_under_its_eval_variant_and_reruns_what_changed(
    tmp_path: Path,
) -> None:
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(params))
    variants = split_variants(path, ("test", "long_horizon"))
    assert {s: v.name for s, v in variants.items()} == {"test": "greedy", "long_horizon": "summary"}
    assert variants["long_horizon"].harness["context"] == "summary"
    fresh = {s: {"n": 200, "harness": v.harness} for s, v in variants.items()}
    assert stale_splits(fresh, variants, 200) == []
    assert stale_splits(fresh, variants, 100) == ["test", "long_horizon"]
    older = {"test": fresh["test"], "long_horizon": {"n": 200, "harness": {"context": "summary"}}}
    assert stale_splits(older, variants, 200) == ["long_horizon"]
    assert stale_splits({"test": {"n": 200}}, variants, 200) == ["test", "long_horizon"]
    params["eval"]["variants"] = params["eval"]["variants"][:1]  # greedy: no long_horizon
    path.write_text(yaml.safe_dump(params))
    with pytest.raises(SystemExit, match=r"no eval variant of .* runs 'long_horizon'"):
        split_variants(path, ("test", "long_horizon"))


def test_a_study_report_leaves_out_cells_it_has_yet_to_redo(tmp_path: Path) -> None:
    """A study that adds a split reports as it goes: until a run's cell of that split is
    redone under sft's settings, the tables show '–' for it, and never raise on it."""
    greedy, summary = {"temperature": 0.0}, {"context": "summary"}

    def cell(outcomes: list[int], harness: dict, kind: str = "wrong_value") -> dict:
        return {"grounded": sum(outcomes), "n": len(outcomes), "variant": "v",
                "harness": harness, "outcomes": outcomes,
                "failures": ["grounded" if o else kind for o in outcomes]}  # fmt: skip

    def run(arm: str, evaluated: dict) -> dict:
        return {"arm": arm, "seed": 0, "train_s": 1.0, "adopted": False, "rl": {},
                "eval": evaluated}  # fmt: skip

    results = {
        "sft": {"eval": {"test": cell([1, 0, 0, 0], greedy), "long_horizon": cell([0] * 4, summary)}},
        "gigpo-s0": run("gigpo", {"test": cell([1, 1, 1, 0], greedy),
                                  "long_horizon": cell([1, 0, 0, 0], summary)}),
        "grpo-s0": run("grpo", {"test": cell([1, 1, 0, 0], greedy)}),  # long_horizon not yet
        "random-s0": run("random", {"test": cell([1, 0, 0, 0], greedy),
                                    "long_horizon": cell([1] * 2, {}, "ran_out")}),  # stale
    }  # fmt: skip
    shapes = {"test": ["calculator×1"] * 2 + ["store×2"] * 2, "long_horizon": ["store×9"] * 4}
    report(results, ("test", "long_horizon"), tmp_path / "study.md", shapes)
    text = (tmp_path / "study.md").read_text()
    runs = text.split("## Runs")[1].split("## Arms")[0]
    rows = {line.split(" | ")[0][2:]: line.split(" | ")[1:]
            for line in runs.splitlines() if line.startswith("| ")}  # fmt: skip
    assert rows["gigpo-s0"][2].startswith("0.25") and rows["grpo-s0"][2] == "–"
    assert rows["random-s0"][2] == "–"  # its stale cell is not shown as current
    arms = text.split("## Arms")[1].split("## Episodes")[0]
    grpo = next(line for line in arms.splitlines() if line.startswith("| grpo | 1 | sft"))
    assert grpo.endswith("| – | – |")  # no mean over the seeds that have the split
    faults = text.split("## Episodes by first fault")[1]
    random_row = next(line for line in faults.splitlines() if line.startswith("| random-s0"))
    assert random_row == "| random-s0 | 1 | 0 | 0 | 0 | 0 | 0 | 3 | 0 |"  # test's; not ran_out
    by_shape = text.split("## Grounded episodes by task family")[1]
    test, long_horizon = by_shape.split("### long_horizon")
    assert "| gigpo (1 seed) | 2/2 | 1/2 |" in test and "| random (1 seed) | 1/2 | 0/2 |" in test
    assert "| grpo" not in long_horizon and "| random" not in long_horizon  # not yet redone


def test_a_study_across_machines_pairs_each_run_against_the_sft_it_started_from(
    tmp_path: Path,
) -> None:
    """Another kind of CPU makes another sft: it gets an entry of its own, and a run that
    started from it is paired against it, not against the first machine's."""
    sft = tmp_path / "sft"
    sft.mkdir()
    (sft / "model.safetensors").write_bytes(b"one")
    results: dict = {}
    assert start_key(results, sft) == "sft"
    (sft / "model.safetensors").write_bytes(b"two")  # rebuilt on another machine
    other = start_key(results, sft)
    assert other.startswith("sft@") and start_key(results, sft) == other

    def cell(outcomes: list[int]) -> dict:
        return {"grounded": sum(outcomes), "n": len(outcomes), "variant": "greedy",
                "harness": {}, "outcomes": outcomes,
                "failures": ["grounded" if o else "wrong_value" for o in outcomes]}  # fmt: skip

    results["sft"]["eval"] = {"test": cell([0, 0, 0, 0])}
    results[other]["eval"] = {"test": cell([1, 1, 0, 0])}
    results["gigpo-s0"] = {"arm": "gigpo", "seed": 0, "eval": {"test": cell([1, 0, 0, 0])}}
    results["gigpo-s1"] = {"arm": "gigpo", "seed": 1, "start": other,
                           "eval": {"test": cell([1, 1, 1, 0])}}  # fmt: skip
    report(results, ("test",), tmp_path / "study.md", {"test": ["calculator×1"] * 4})
    text = (tmp_path / "study.md").read_text()
    assert text.startswith("sft `") and f"; {other} `" in text.splitlines()[0]
    runs = text.split("## Runs")[1].split("## Arms")[0]
    vs = {line.split(" | ")[0][2:]: line.split(" | ")[2]
          for line in runs.splitlines() if line.startswith("| gigpo")}  # fmt: skip
    assert vs["gigpo-s0"].startswith("+0.250") and "won 1, lost 0 of 4" in vs["gigpo-s0"]
    assert vs["gigpo-s1"].startswith("+0.250") and "won 1, lost 0 of 4" in vs["gigpo-s1"]
    arms = text.split("## Arms")[1].split("## Episodes")[0]
    assert "won 2, lost 0 of 8" in next(
        line for line in arms.splitlines() if "| gigpo | 2 |" in line
    )
    shapes = text.split("### test")[1]
    assert "| sft | 0/4 |" in shapes and f"| {other} | 2/4 |" in shapes
