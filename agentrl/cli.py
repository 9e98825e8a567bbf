"""The ``agentrl`` command: inspect params, families and samples. Stages run via DVC.

agentrl --help
agentrl params                 # validate params.yaml, print the typed result
agentrl families               # families, their tools and vocabulary sizes
agentrl sample calculator      # one freshly synthesised, verified sample as JSON
agentrl rollout --model models/sft --split test --n 32 --context window --out runs/test.jsonl
agentrl chat --model models/rl --family convert   # ask it in the terminal, real tools
agentrl serve --model models/sft --port 8000   # OpenAI-compatible completions server
agentrl rollout --model models/sft --engine openai --url http://127.0.0.1:8000 --out runs/x.jsonl
agentrl profile infra/profiles/qwen2.5-0.5b.yaml   # a GPU profile over params.yaml

Errors take the stages' path (agentrl/stage.py): one line, exit 2 for bad params, a plugin
or a model that does not load, 1 for a failed run; AGENTRL_DEBUG=1 adds the traceback.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from agentrl.config import ConfigError, HarnessSection, Params, SplitSection, load_params
from agentrl.stage import error_path

app = typer.Typer(help="Train tool-using LLM agents with RL, reproducibly.", no_args_is_help=True)
console = Console()
ParamsFile = Annotated[Path, typer.Option("--params", help="params file")]


def _params(path: Path) -> Params:
    return load_params(path)


@app.command()
def params(
    path: ParamsFile = Path("params.yaml"),
    doc: Annotated[
        bool, typer.Option("--doc", help="print the params reference (docs/params.md) instead")
    ] = False,
) -> None:
    """Validate a params file and print it with every default filled in."""
    if doc:
        from agentrl.params_doc import params_reference

        sys.stdout.write(params_reference())
        return
    console.print_json(_params(path).model_dump_json())


@app.command()
def families(path: ParamsFile = Path("params.yaml")) -> None:
    """List task families (built-in and plugins) and their tools."""
    from agentrl.synth.pipeline import build_registry

    registry = build_registry(_params(path).synth, str(path))
    table = Table("family", "tool", "train names", "held-out names")
    for family, env in registry.envs.items():
        for tool in env.toolbox.TOOLS:
            names = registry.partition.names.get(tool, {"train": [], "heldout": []})
            table.add_row(family, tool, str(len(names["train"])), str(len(names["heldout"])))
    console.print(table)


@app.command()
def sample(
    family: str = typer.Argument(..., help="family name, e.g. calculator"),
    split: str = typer.Option("sft", help="split whose settings and world to use"),
    index: int = typer.Option(0, help="sample index (the same index gives the same sample)"),
    path: ParamsFile = Path("params.yaml"),
) -> None:
    """Synthesise one verified sample of a family and print it as JSON."""
    from agentrl.synth.pipeline import build_registry
    from agentrl.synth.sampler import Sampler

    cfg = _params(path)
    registry = build_registry(cfg.synth, str(path))
    if family not in registry.envs:
        raise ConfigError(f"family '{family}': unknown (known: {', '.join(registry.envs)})")
    split_cfg = cfg.synth.splits.get(split) or SplitSection(n=1)
    outcome = Sampler(registry, cfg.base.seed, cfg.synth.teacher).sample(
        split, split_cfg, [family], index
    )
    if outcome.record is None:
        console.print(f"[yellow]rejected:[/yellow] {outcome.reason}")
        raise typer.Exit(1)
    sys.stdout.write(json.dumps(outcome.record, indent=2, ensure_ascii=False) + "\n")


def _harness_options(
    cfg: Params,
    context: str | None,
    engine: str | None,
    url: str | None,
    temperature: float | None,
    variant: str | None = None,
) -> HarnessSection:
    """params.yaml's harness (with an eval variant's changes, if one is named) and the
    command line's options over it, validated."""
    base = cfg.harness
    if variant is not None:
        known = [v.name for v in cfg.eval.variants]
        if variant not in known:
            raise ConfigError(f"--variant: {variant!r} is not an eval variant ({', '.join(known)})")
        base = cfg.eval.variant(variant).applied_to(base)
    overrides = {
        "context": context,
        "engine": engine,
        "engine_url": url,
        "temperature": temperature,
    }
    overrides = {key: value for key, value in overrides.items() if value is not None}
    try:
        return HarnessSection.model_validate(base.model_dump() | overrides)
    except ValueError as err:
        problem = err.errors()[0]
        option = str(problem["loc"][0]).replace("engine_", "")
        raise ConfigError(f"--{option}: {problem['input']!r} is not valid") from err


@app.command()
def rollout(
    model: Annotated[Path, typer.Option(help="a saved model dir (models/sft, models/rl, ...)")],
    out: Annotated[Path, typer.Option(help="trajectories as JSON lines")],
    split: str = typer.Option("test", help="split whose tasks to run"),
    n: int = typer.Option(32, min=1, help="tasks"),
    samples: int = typer.Option(1, min=1, help="episodes per task"),
    context: str | None = typer.Option(None, help="context strategy; default harness.context"),
    engine: str | None = typer.Option(None, help="hf | openai; default harness.engine"),
    url: str | None = typer.Option(None, help="openai engine server; default harness.engine_url"),
    temperature: float | None = typer.Option(
        None, help="sampling temperature (0: greedy); default harness.temperature"
    ),
    variant: str | None = typer.Option(
        None, help="run with this eval variant's harness (the options above still apply)"
    ),
    path: ParamsFile = Path("params.yaml"),
) -> None:
    """Run a model through the agent harness on a split; write trajectories, print figures.
    With ``--variant`` the turn budget must fit the split's expert trajectories, as in the
    eval stage."""
    import torch

    from agentrl.atomic import write_text_atomic
    from agentrl.chat import get_format
    from agentrl.dataset import iter_records
    from agentrl.envs.registry import load_registry
    from agentrl.eval.suite import check_turn_budget, max_turns_key
    from agentrl.harness.build import build_engine
    from agentrl.harness.loop import Harness
    from agentrl.harness.metrics import summarize
    from agentrl.precision import stage_precision

    cfg = _params(path)
    precision = stage_precision(cfg.base.precision, str(path))
    harness_cfg = _harness_options(cfg, context, engine, url, temperature, variant)
    fmt = get_format(cfg.model.format)
    registry = load_registry(cfg.synth.envs, cfg.synth.heldout_tool_share, str(path))
    records = list(iter_records(Path(cfg.base.paths.data) / "synth", split, n))
    if variant is not None:
        key = f"{path}: {max_turns_key(cfg.eval.variant(variant))}"
        check_turn_budget(records, harness_cfg.max_turns, key, split)
    policy_engine, tokenizer = build_engine(harness_cfg, model, fmt, precision)
    torch.manual_seed(cfg.base.seed)
    harness = Harness(policy_engine, tokenizer, fmt, registry, harness_cfg)
    try:
        episodes = harness.run(records, samples=samples, seed=cfg.base.seed)
    finally:
        harness.close()
    write_text_atomic(out, "".join(json.dumps(e.to_json()) + "\n" for e in episodes))
    table = Table("metric", "value", title=f"{model} on {split} ({harness_cfg.context})")
    for key, value in summarize(episodes).items():
        table.add_row(key, f"{value:.3f}" if isinstance(value, float) else str(value))
    console.print(table)


@app.command()
def chat(
    model: Annotated[Path, typer.Option(help="a saved model dir (models/sft, models/rl, ...)")],
    family: str = typer.Option(..., help="task family whose tools and world to use"),
    split: str = typer.Option("test", help="split whose world the session binds"),
    index: int = typer.Option(0, help="which of the split's worlds (the same index, the same one)"),
    context: str | None = typer.Option(None, help="context strategy; default harness.context"),
    engine: str | None = typer.Option(None, help="hf | openai; default harness.engine"),
    url: str | None = typer.Option(None, help="openai engine server; default harness.engine_url"),
    temperature: float = typer.Option(0.0, help="sampling temperature (0: greedy)"),
    path: ParamsFile = Path("params.yaml"),
) -> None:
    """Talk to a checkpoint in the terminal: it answers with a family's real tools."""
    from agentrl.chat import get_format
    from agentrl.envs.registry import load_registry
    from agentrl.harness.build import build_engine
    from agentrl.harness.loop import Harness
    from agentrl.precision import stage_precision
    from agentrl.terminal_chat import chat_world, run_session

    cfg = _params(path)
    harness_cfg = _harness_options(cfg, context, engine, url, temperature)
    registry = load_registry(cfg.synth.envs, cfg.synth.heldout_tool_share, str(path))
    world = chat_world(registry, family, split, index, cfg.base.seed, str(path))
    fmt = get_format(cfg.model.format)
    precision = stage_precision(cfg.base.precision, str(path))
    policy_engine, tokenizer = build_engine(harness_cfg, model, fmt, precision)
    harness = Harness(policy_engine, tokenizer, fmt, registry, harness_cfg)
    console.print(f"{model} ({harness_cfg.engine}, context {harness_cfg.context}); "
                  "an empty line ends the session")  # fmt: skip
    try:
        run_session(harness, world, console, seed=cfg.base.seed)
    finally:
        harness.close()


@app.command()
def serve(
    model: Annotated[Path, typer.Option(help="a saved model dir (models/sft, models/rl, ...)")],
    host: str = typer.Option("127.0.0.1", help="bind address (127.0.0.1: this machine only)"),
    port: int = typer.Option(8000, help="port"),
    name: str | None = typer.Option(None, help="served model name; default harness.engine_model"),
    path: ParamsFile = Path("params.yaml"),
) -> None:
    """Serve a checkpoint as an OpenAI-compatible completions endpoint (token ids in/out)."""
    import uvicorn

    from agentrl.chat import get_format
    from agentrl.harness.engine import HFEngine
    from agentrl.model.build import load_model_dir
    from agentrl.precision import DTYPES, stage_precision
    from agentrl.serve import build_app

    cfg = _params(path)
    precision = stage_precision(cfg.base.precision, str(path))
    policy, tokenizer = load_model_dir(model, get_format(cfg.model.format), DTYPES[precision])
    served = name or cfg.harness.engine_model
    limit = policy.config.max_position_embeddings
    app_ = build_app(HFEngine(policy, tokenizer), tokenizer, served, limit)
    console.print(f"serving {model} as '{served}' on http://{host}:{port}/v1")
    uvicorn.run(app_, host=host, port=port, log_level="warning")


@app.command()
def profile(
    path: Annotated[
        Path, typer.Argument(help="profile file, e.g. infra/profiles/qwen2.5-0.5b.yaml")
    ],
    params_path: ParamsFile = Path("params.yaml"),
    out: Annotated[Path | None, typer.Option(help="where to write (default: --params)")] = None,
) -> None:
    """Lay a profile over params.yaml (sections merge key by key), validated first."""
    from agentrl.profiles import apply_profile

    target = out or params_path
    apply_profile(path, params_path, target)
    console.print(f"{target}: {params_path} + {path}")


def main() -> None:
    """The console script: every command through the stages' error path."""
    with error_path():
        app()


if __name__ == "__main__":
    main()
