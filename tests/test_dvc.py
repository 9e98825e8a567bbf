"""The synth stage through real `dvc repro` in a temporary git repository."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
import yaml
from conftest import producer, write_params
from conftest import repo_ok as _ok
from conftest import repo_run as _run
from transformers import AutoModelForCausalLM, AutoTokenizer

from agentrl.precision import device_type, native_bf16, resolve
from agentrl.tracking import content_digest


@pytest.fixture(scope="module")
def repo(dvc_project: Path) -> Path:
    return dvc_project


def test_repro_runs_the_dag_then_is_a_noop_then_reruns_what_a_param_touches(
    repo: Path, first_repro: tuple[str, Path]
) -> None:
    out, _ = first_repro
    for name in ("synth", "init", "midtrain", "sft", "pivots", "rl"):
        assert f"Running stage '{name}'" in out
    store = f"sqlite:///{repo / 'mlflow.db'}"
    first = producer(store, repo / "data" / "synth")
    assert (repo / "mlflow.db").is_file()  # default store: sqlite at the repository root
    model = AutoModelForCausalLM.from_pretrained(repo / "models" / "sft")
    tokenizer = AutoTokenizer.from_pretrained(repo / "models" / "sft")
    assert model.config.vocab_size == len(tokenizer)
    sft = producer(store, repo / "models" / "sft")
    assert first and sft and not list(repo.glob("**/run.json"))  # lineage lives in MLflow only
    lock = yaml.safe_load((repo / "dvc.lock").read_text())
    assert lock["stages"]["synth"]["params"]["params.yaml"]["synth"]["splits"]["test"]["n"] == 30
    shown = _ok(repo, "dvc", "metrics", "show")
    stages = ("synth", "midtrain", "sft", "pivots", "rl")
    assert all(f"metrics/{name}.json" in shown for name in stages)
    import mlflow

    mlflow.set_tracking_uri(store)
    here = resolve("auto", device_type(), native_bf16(device_type()))  # base.precision: auto
    outputs = [repo / "models" / name for name in ("midtrain", "sft", "rl")]
    for output in [*outputs, repo / "data" / "pivots"]:  # every stage running the model says how
        assert mlflow.get_run(producer(store, output)).data.params["precision"] == here

    again = _ok(repo, "dvc", "repro")
    assert "Running stage" not in again
    assert producer(store, repo / "data" / "synth") == first
    assert "up to date" in _ok(repo, "dvc", "status")
    cache = repo / "agentrl" / "envs" / "__pycache__"  # written by any stage that imports envs
    cache.mkdir(exist_ok=True)
    (cache / "world.cpython-312.pyc").write_bytes(b"bytecode")
    assert "up to date" in _ok(repo, "dvc", "status")  # not a change to a code dependency

    params = yaml.safe_load((repo / "params.yaml").read_text())
    params["tracking"]["experiment"] = "renamed"  # tracking is not a dependency: no rerun
    write_params(repo / "params.yaml", params)
    assert "up to date" in _ok(repo, "dvc", "status")

    params["synth"]["splits"]["heldout_compose"]["n"] = 12  # consumed by no trained stage
    write_params(repo / "params.yaml", params)
    out = _ok(repo, "dvc", "repro")
    assert (
        "Running stage 'synth'" in out
        and "Running stage 'init'" not in out
        and "Running stage 'sft'" not in out
    )
    assert producer(store, repo / "data" / "synth") != first
    assert producer(store, repo / "models" / "sft") == sft
    assert (
        json.loads((repo / "metrics" / "synth.json").read_text())["splits"]["heldout_compose"][
            "samples"
        ]
        == 12
    )


def test_bad_params_fail_repro_and_the_cache_restores_outputs(repo: Path) -> None:
    good = (repo / "params.yaml").read_text()
    digest_before = content_digest(repo / "data" / "synth")
    params = yaml.safe_load(good)
    params["synth"]["splits"]["sft"]["n"] = "many"
    write_params(repo / "params.yaml", params)
    result = _run(repo, "dvc", "repro")
    assert result.returncode != 0
    assert (
        "params.yaml: synth.splits.sft.n: Input should be a valid integer"
        in result.stdout + result.stderr
    )
    assert not list((repo / "data").glob(".synth.*"))  # no half-written output left behind
    assert (
        not (repo / "data" / "synth").exists()
        or content_digest(repo / "data" / "synth") == digest_before
    )
    (repo / "params.yaml").write_text(good)
    out = _ok(repo, "dvc", "repro")
    assert "Running stage" not in out  # same params as a cached run: restored, not recomputed
    assert content_digest(repo / "data" / "synth") == digest_before


def test_pivots_are_profiled_only_when_rl_draws_them(repo: Path) -> None:
    """rl.rollouts episodes (the default): the pivots stage writes no row and says why;
    mix: it profiles every candidate that fits the context; back: restored from the cache."""
    _ok(repo, "dvc", "repro")
    skipped = json.loads((repo / "metrics" / "pivots.json").read_text())
    assert skipped["profiled"] == 0 and "rl.rollouts is episodes" in skipped["profiled_because"]
    assert (repo / "data" / "pivots" / "pivots.jsonl").read_text() == ""
    good = (repo / "params.yaml").read_text()
    params = yaml.safe_load(good)
    params["rl"]["rollouts"] = "mix"
    write_params(repo / "params.yaml", params)
    out = _ok(repo, "dvc", "repro", "pivots")
    assert "Running stage 'pivots'" in out and "Running stage 'sft'" not in out, out
    profiled = json.loads((repo / "metrics" / "pivots.json").read_text())
    rows = (repo / "data" / "pivots" / "pivots.jsonl").read_text().splitlines()
    assert profiled["profiled"] == len(rows) > 0
    assert profiled["candidates"] == skipped["candidates"]
    (repo / "params.yaml").write_text(good)
    assert "Running stage" not in _ok(repo, "dvc", "repro")


def test_rl_experiments_rerun_only_rl_and_show_side_by_side(repo: Path) -> None:
    _ok(repo, "dvc", "repro")
    _ok(repo, "git", "add", "-A")
    _ok(repo, "git", "commit", "-qm", "baseline")
    # an experiment leaves its params in the workspace: each run sets every param it varies
    for name, advantage, reward in (("gigpo", "gigpo", "verifier"), ("control", "grpo", "random")):
        out = _ok(
            repo, "dvc", "exp", "run", "-n", name,
            "-S", f"rl.advantage={advantage}", "-S", f"rl.reward={reward}",
        )  # fmt: skip
        assert "Running stage 'rl'" in out, out
        assert not any(f"Running stage '{s}'" in out for s in ("synth", "midtrain", "sft")), out
    shown = _ok(repo, "dvc", "exp", "show", "--csv", "--no-pager")
    rows = list(csv.DictReader(io.StringIO(shown)))
    for column in ("rl.advantage", "rl.reward", "last.reward_mean", "last.zero_variance_share"):
        assert column in rows[0], list(rows[0])
    named = {row["Experiment"]: row for row in rows if row["Experiment"]}
    assert {"gigpo", "control"} <= set(named), shown
    assert named["gigpo"]["rl.advantage"] == "gigpo" and named["gigpo"]["rl.reward"] == "verifier"
    assert named["control"]["rl.reward"] == "random" and named["control"]["rl.advantage"] == "grpo"


METRIC_KEYS = {
    "episodes", "tasks", "success", "success_low", "success_high", "grounded_success",
    "grounded_success_low", "grounded_success_high", "pass_at_1", "pass_at_2", "reward",
    "tool_calls", "tool_call_validity", "tool_error_rate", "turns", "tokens_per_episode",
    "peak_context", "compactions", "first_fault",
}  # fmt: skip
SPLITS = {"test", "heldout_tools", "heldout_compose", "long_horizon"}


def test_eval_and_report_end_the_dag_with_traces_and_diff_across_experiments(repo: Path) -> None:
    import mlflow

    _ok(repo, "dvc", "repro")
    metrics = json.loads((repo / "metrics" / "eval.json").read_text())
    assert set(metrics) == {"midtrain", "sft", "rl", "bfcl", "paired"}
    assert set(metrics["paired"]) == {"sft-midtrain", "rl-sft"}  # each against the one before
    for pair in metrics["paired"].values():
        for d in pair["sampled"].values():  # 2 tasks x 2 samples, (task, sample) pairs
            assert d["pairs"] == 4 and d["low"] <= d["difference"] <= d["high"]
    assert set(metrics["bfcl"]["rl-sft"]) == {"simple", "multiple", "parallel"}
    for checkpoint in ("midtrain", "sft", "rl"):
        assert set(metrics[checkpoint]) == {"sampled", "summary"}  # two variants: a level
        assert set(metrics[checkpoint]["sampled"]) == SPLITS
        assert set(metrics[checkpoint]["summary"]) == {"long_horizon"}
        for m in metrics[checkpoint]["sampled"].values():
            assert set(m) == METRIC_KEYS
            assert m["episodes"] == 4 and m["tasks"] == 2
            assert m["grounded_success_low"] <= m["grounded_success"] <= m["grounded_success_high"]
            assert m["peak_context"] <= 512
            faults = m["first_fault"]  # every episode once, the grounded ones as such
            assert sum(faults.values()) == 4 and faults["grounded"] == m["grounded_success"] * 4
        for category, m in metrics["bfcl"][checkpoint].items():
            assert category in ("simple", "multiple", "parallel") and m["questions"] == 2
            wrong = m["over_context"] + m["parse_error"] + m["no_call"] + m["wrong_call"]
            assert round(m["accuracy"] * 2) + wrong == 2
    samples = sorted(p.name for p in (repo / "reports" / "trajectories").glob("*.jsonl"))
    assert "sft.sampled.test.jsonl" in samples and "rl.bfcl.jsonl" in samples

    report = (repo / "reports" / "report.md").read_text()
    assert report.split("\n")[4].startswith("## Did training help? (midtrain → sft, sft → rl)")
    for heading in ("## What went wrong first", "## Learning curves", "## Evaluation",
                    "## Context strategies", "## BFCL", "## Lineage"):  # fmt: skip
        assert heading in report
    store = f"sqlite:///{repo / 'mlflow.db'}"
    eval_run = producer(store, repo / "reports" / "trajectories")
    rl_digest = content_digest(repo / "models" / "rl")[:32]
    assert rl_digest in report and "run id" not in report  # lineage by content, ids in MLflow
    for png in ("learning_curves", "eval_success", "horizon"):
        assert (repo / "reports" / "figures" / f"{png}.png").read_bytes()[
            :8
        ] == b"\x89PNG\r\n\x1a\n"

    mlflow.set_tracking_uri(f"sqlite:///{repo / 'mlflow.db'}")
    run = mlflow.get_run(eval_run)
    assert run.data.metrics["sft.sampled.test.episodes"] == 4
    assert run.data.params["precision"] == resolve("auto", "cpu", native_bf16("cpu"))
    assert "bfcl.rl.simple.accuracy" in run.data.metrics
    artifacts = {a.path for a in mlflow.MlflowClient().list_artifacts(eval_run)}
    assert {"eval_table.json", "eval.json", "trajectories"} <= artifacts
    traces = mlflow.search_traces(
        locations=[run.info.experiment_id], run_id=eval_run, return_type="list"
    )
    assert len(traces) == 3 * 4  # headline variant: a sample episode per checkpoint x split
    spans = [[s.span_type for s in trace.data.spans] for trace in traces]
    assert all(kinds[0] == "AGENT" for kinds in spans)
    assert any("LLM" in kinds for kinds in spans)  # a task too long for 512 tokens has no turn
    reports = mlflow.search_runs(
        search_all_experiments=True, filter_string="tags.stage = 'report'", output_format="list"
    )
    assert len(reports) >= 1
    logged = mlflow.artifacts.load_dict(f"runs:/{reports[0].info.run_id}/lineage.json")
    assert logged["eval"]["run_id"] == eval_run and logged["rl"]["digest"] == rl_digest
    assert reports[0].data.tags["upstream.eval"] == eval_run

    _ok(repo, "git", "add", "-A")
    _ok(repo, "git", "commit", "-qm", "with eval")
    # an experiment leaves its params in the workspace: each run sets every param it varies
    for name, tasks in (("eval-a", 2), ("eval-b", 3)):
        out = _ok(repo, "dvc", "exp", "run", "-n", name, "-S", f"eval.tasks={tasks}")
        if tasks == 2:  # the baseline's value: nothing to rerun
            continue
        assert "Running stage 'eval'" in out and "Running stage 'report'" in out, out
        assert "Running stage 'rl'" not in out and "Running stage 'sft'" not in out, out
    diff = json.loads(_ok(repo, "dvc", "metrics", "diff", "eval-a", "eval-b", "--json"))
    episodes = diff["metrics/eval.json"]["sft.sampled.test.episodes"]
    assert (episodes["old"], episodes["new"]) == (4, 6)  # 2 then 3 tasks x 2 samples
    every = json.loads(_ok(repo, "dvc", "metrics", "diff", "eval-a", "eval-b", "--all", "--json"))
    assert "bfcl.rl.simple.accuracy" in every["metrics/eval.json"]
    plots = json.loads(_ok(repo, "dvc", "plots", "diff", "eval-a", "eval-b", "--json"))["data"]
    for plot in ("plots/eval_success.tsv", "horizon"):
        assert plots[plot][0]["revisions"] == ["eval-a", "eval-b"], plots.get(plot)
