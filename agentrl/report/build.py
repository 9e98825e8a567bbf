"""reports/report.md: the paired comparison of each checkpoint with the one before it (the
verdict first), what went wrong first in each checkpoint's failed episodes, learning
curves, the eval table with intervals, the context-strategy comparison, BFCL, and lineage
(params digest, content digest of every stage output), as markdown that reads on a git
host, with PNGs beside it in reports/figures/. It holds nothing but figures of its inputs,
so equal inputs give an equal report; commits and MLflow run ids are in MLflow (the report
run's ``lineage.json``)."""

from __future__ import annotations

import json
from collections import Counter
from itertools import pairwise
from pathlib import Path
from typing import Any

from agentrl.config import EVAL_SPLITS, Params, digest
from agentrl.report.figures import eval_bars, horizon_lines, learning_curves, read_tsv
from agentrl.tracking import content_digest

LINEAGE = (("synth", "data/synth"), ("init", "models/base"), ("midtrain", "models/midtrain"),
           ("sft", "models/sft"), ("rl", "models/rl"), ("eval", "reports/trajectories"))  # fmt: skip


def cells_of(metrics: dict[str, Any], params: Params) -> list[dict[str, Any]]:
    """metrics/eval.json (``{checkpoint: {variant: {split: metrics}}}``) back into cells."""
    out = []
    for checkpoint in params.eval.checkpoints:
        for variant in [v.name for v in params.eval.variants]:
            found = metrics.get(checkpoint, {}).get(variant, {})
            for split in sorted(found, key=lambda s: EVAL_SPLITS.index(s)):
                m = found[split]
                out.append(
                    {"checkpoint": checkpoint, "variant": variant, "split": split, "metrics": m}
                )
    return out


def _ci(m: dict[str, Any], key: str) -> str:
    return f"{m[key]:.3f} [{m[f'{key}_low']:.3f}, {m[f'{key}_high']:.3f}]"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def eval_table(cells: list[dict[str, Any]], pass_k: list[int]) -> list[str]:
    ks = [k for k in pass_k if k > 1]
    header = ["checkpoint", "split", "grounded success [95% CI]", "success [95% CI]",
              *[f"pass@{k}" for k in ks], "reward", "valid calls", "tool errors", "turns",
              "tokens/episode", "peak context", "episodes"]  # fmt: skip
    rows = []
    for c in cells:
        m = c["metrics"]
        rows.append([c["checkpoint"], c["split"], _ci(m, "grounded_success"), _ci(m, "success"),
                     *[f"{m[f'pass_at_{k}']:.3f}" if f"pass_at_{k}" in m else "–" for k in ks],
                     f"{m['reward']:.3f}", f"{m['tool_call_validity']:.3f}",
                     f"{m['tool_error_rate']:.3f}", f"{m['turns']:.1f}",
                     f"{m['tokens_per_episode']:.0f}", str(m["peak_context"]), str(m["episodes"])])  # fmt: skip
    return _table(header, rows)


def paired_table(metrics: dict[str, Any], params: Params) -> list[str]:
    """The report's first table: each later checkpoint against the one before it, per
    variant and split (and BFCL category), with the verdict in words."""
    rows = []
    bfcl = metrics.get("bfcl", {})
    order = params.eval.checkpoints  # metrics files sort their keys: pipeline order instead
    pairs = [f"{b}-{a}" for a, b in pairwise(order) if f"{b}-{a}" in metrics.get("paired", {})]
    for pair in pairs:
        by_variant, (after, before) = metrics["paired"][pair], pair.split("-")
        for variant in [v.name for v in params.eval.variants if v.name in by_variant]:
            for split in sorted(by_variant[variant], key=EVAL_SPLITS.index):
                rates = [metrics[c][variant][split]["grounded_success"] for c in (before, after)]
                rows.append([variant, split, *_pair_row(after, before, rates,
                                                         by_variant[variant][split])])  # fmt: skip
        for category, d in bfcl.get(pair, {}).items():
            rates = [bfcl[c][category]["accuracy"] for c in (before, after)]
            rows.append(["BFCL", category, *_pair_row(after, before, rates, d)])
    if not rows:
        return []
    pair_names = [" → ".join(reversed(p.split("-"))) for p in pairs]
    header = ["variant", "split", "before", "after", "difference [95% CI]", "won / lost / pairs",
              "verdict"]  # fmt: skip
    return [f"## Did training help? ({', '.join(pair_names)})", "", *_table(header, rows)]


def fault_table(cells: list[dict[str, Any]]) -> list[str]:
    """Episodes of each cell by the first thing that went wrong (``first_fault``), split by
    split under the first variant that runs it (the headline; long_horizon's own context
    strategy) and checkpoint beside checkpoint: what training fixed and what it did not.
    Kinds are columns, the commonest first; cells written before the eval counted faults
    are left out."""
    first: dict[str, str] = {}
    for c in cells:
        first.setdefault(c["split"], c["variant"])
    counted = [
        c for c in cells if "first_fault" in c["metrics"] and first[c["split"]] == c["variant"]
    ]
    if not counted:
        return []
    totals: Counter[str] = Counter()
    for c in counted:
        totals.update(c["metrics"]["first_fault"])
    kinds = [kind for kind, _ in totals.most_common()]
    rows = [[c["split"], c["variant"], c["checkpoint"],
             *(str(c["metrics"]["first_fault"].get(k, 0)) for k in kinds)]
            for c in sorted(counted, key=lambda c: EVAL_SPLITS.index(c["split"]))]  # fmt: skip
    return [
        "## What went wrong first", "",
        "Episodes by their first fault against the task's expert trajectory: `wrong_answer` "
        "had every observation the expert's calls got and answered wrong; `ran_out` hit the "
        "turn or context limit; the call kinds name the first call the expert never made "
        "(never recovered from); `answered_early` made only right calls but answered before "
        "the last one.", "",
        *_table(["split", "variant", "checkpoint", *kinds], rows),
    ]  # fmt: skip


def _pair_row(after: str, before: str, rates: list[float], d: dict[str, Any]) -> list[str]:
    verdict = d["verdict"] if d["verdict"].startswith("no ") else f"{after} {d['verdict']}"
    return [f"{before} {rates[0]:.3f}", f"{after} {rates[1]:.3f}",
            f"{d['difference']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}]",
            f"{d['won']} / {d['lost']} / {d['pairs']}", f"**{verdict}**"]  # fmt: skip


def lineage(params: Params) -> dict[str, dict[str, str]]:
    """Each stage's output path and content digest (the key of its MLflow ``lineage.`` tag)."""
    out = {}
    for stage, rel in LINEAGE:
        path = _resolve(params, rel)
        out[stage] = {
            "path": str(path),
            "digest": content_digest(path)[:32] if path.exists() else "",
        }
    return out


def _lineage_lines(params: Params, stages: dict[str, dict[str, str]]) -> list[str]:
    rows = [[stage, f"`{s['path']}`", f"`{s['digest'] or '–'}`"] for stage, s in stages.items()]
    params_digest = digest(params.model_dump(mode="json"))
    head = [f"- params digest: `{params_digest}` (sha256 prefix of the validated params.yaml)",
            "- the MLflow run that wrote an output carries the tag `lineage.<content digest>`", ""]  # fmt: skip
    return head + _table(["stage", "output", "content digest"], rows)


def _resolve(params: Params, rel: str) -> Path:
    top, rest = rel.split("/", 1)
    return Path(getattr(params.base.paths, top)) / rest


def build_report(params: Params, stages: dict[str, dict[str, str]], figures: Path) -> str:
    """Draw the PNGs into ``figures`` and return the markdown, which links them as
    ``figures/<name>.png`` (the directory beside report.md)."""
    paths = params.base.paths
    plots = Path(paths.plots)
    metrics = json.loads((Path(paths.metrics) / "eval.json").read_text())
    cells = cells_of(metrics, params)
    headline = params.eval.variants[0].name
    learning_curves(plots, figures / "learning_curves.png")
    eval_bars([c for c in cells if c["variant"] == headline], figures / "eval_success.png")
    horizon = read_tsv(plots / "eval_horizon.tsv")
    horizon_lines(horizon, figures / "horizon.png")

    lines = ["# agentrl run report", "",
             "Every figure below is computed by the stages of this DAG on worlds the model never "
             "saw in training. *Grounded* success counts an answer only when it was read off a "
             "tool result in that episode. Rates have Wilson 95% intervals; differences between "
             "checkpoints are paired over the same tasks, with Newcombe's 95% interval, and the "
             "verdict is the interval's: better or worse only when it excludes 0.", ""]  # fmt: skip
    lines += paired_table(metrics, params)
    lines += ["", *fault_table(cells)]
    lines += ["", "## Learning curves", "", "![learning curves](figures/learning_curves.png)", ""]
    for stage in ("midtrain", "sft", "rl"):
        path = Path(paths.metrics) / f"{stage}.json"
        if path.is_file():
            lines.append(f"- {stage}: {_stage_summary(stage, json.loads(path.read_text()))}")
    lines += ["", f"## Evaluation (harness variant `{headline}`)", "",
              "![grounded success per split](figures/eval_success.png)", ""]  # fmt: skip
    lines += eval_table([c for c in cells if c["variant"] == headline], params.eval.pass_k)
    for variant in params.eval.variants[1:]:
        chosen = [c for c in cells if c["variant"] == variant.name and c["split"] != "long_horizon"]
        if chosen:
            lines += ["", f"### Variant `{variant.name}` ({json.dumps(variant.harness)})", ""]
            lines += eval_table(chosen, params.eval.pass_k)
    lines += [
        "",
        "## Context strategies on long_horizon",
        "",
        "![horizon](figures/horizon.png)",
        "",
    ]
    lines += _strategies(cells, params)
    if "bfcl" in metrics:
        lines += ["", "## BFCL (non-live AST categories)", "", *_bfcl(metrics["bfcl"], params)]
    lines += ["", "## Lineage", "", *_lineage_lines(params, stages)]
    lines += ["", "Compare two runs: `dvc metrics diff <rev>` and `dvc plots diff <rev>`; "
              "`dvc exp show` lists experiments side by side.", ""]  # fmt: skip
    return "\n".join(lines)


def _precision(m: dict[str, Any]) -> str:
    return f", in {m['precision']}" if "precision" in m else ""


def _stage_summary(stage: str, m: dict[str, Any]) -> str:
    if stage == "rl":
        mean = m.get("mean", {})
        return (f"{m.get('steps')} steps, mean reward {mean.get('reward_mean', 0):.3f}, "
                f"mean grounded success {mean.get('grounded_success', 0):.3f} ({m.get('advantage')}, "
                f"reward {m.get('reward')}){_precision(m)}")  # fmt: skip
    check = m.get("format_check", {})
    extra = f", first-call validity {check['valid']:.3f}" if "valid" in check else ""
    return (f"{m.get('steps')} steps, loss {m.get('loss', 0):.3f}, eval loss "
            f"{m.get('eval_loss', 0):.3f}{extra}{_precision(m)}")  # fmt: skip


def _strategies(cells: list[dict[str, Any]], params: Params) -> list[str]:
    rows = []
    for c in cells:
        if c["split"] != "long_horizon":
            continue
        strategy = params.eval.variant(c["variant"]).applied_to(params.harness).context
        m = c["metrics"]
        rows.append([c["checkpoint"], c["variant"], strategy, _ci(m, "grounded_success"),
                     f"{m['turns']:.1f}", f"{m['tokens_per_episode']:.0f}", str(m["peak_context"]),
                     f"{m['compactions']:.2f}", f"{m['tool_call_validity']:.3f}"])  # fmt: skip
    header = ["checkpoint", "variant", "context", "grounded success [95% CI]", "turns",
              "tokens/episode", "peak context", "compactions/episode", "valid calls"]  # fmt: skip
    return _table(header, rows)


def _bfcl(bfcl: dict[str, Any], params: Params) -> list[str]:
    rows = []
    for checkpoint in [c for c in params.eval.checkpoints if c in bfcl]:
        for category in [c for c in params.eval.bfcl.categories if c in bfcl[checkpoint]]:
            m = bfcl[checkpoint][category]
            rows.append([checkpoint, category, _ci(m, "accuracy"), str(m["questions"]),
                         str(m["over_context"]), str(m["parse_error"]), str(m["no_call"]),
                         str(m["wrong_call"])])  # fmt: skip
    header = ["checkpoint", "category", "accuracy [95% CI]", "questions", "over context",
              "parse errors", "no call", "wrong call"]  # fmt: skip
    return _table(header, rows)
