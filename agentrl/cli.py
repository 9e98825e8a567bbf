"""The ``agentrl`` command: inspect params, families and samples. Stages run via DVC.

agentrl --help
agentrl params                 # validate params.yaml, print the typed result
agentrl families               # families, their tools and vocabulary sizes
agentrl sample calculator      # one freshly synthesised, verified sample as JSON
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from agentrl.config import ConfigError, SplitSection, load_params

app = typer.Typer(help="Train tool-using LLM agents with RL, reproducibly.", no_args_is_help=True)
console = Console()
ParamsFile = Annotated[Path, typer.Option("--params", help="params file")]


def _params(path: Path):
    try:
        return load_params(path)
    except ConfigError as err:
        console.print(f"[red]error:[/red] {err}")
        raise typer.Exit(2) from err


@app.command()
def params(path: ParamsFile = Path("params.yaml")) -> None:
    """Validate a params file and print it with every default filled in."""
    console.print_json(_params(path).model_dump_json())


@app.command()
def families(path: ParamsFile = Path("params.yaml")) -> None:
    """List task families (built-in and plugins) and their tools."""
    from agentrl.synth.pipeline import build_registry

    try:
        registry = build_registry(_params(path).synth, str(path))
    except ConfigError as err:
        console.print(f"[red]error:[/red] {err}")
        raise typer.Exit(2) from err
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
        console.print(
            f"[red]error:[/red] unknown family '{family}' (known: {', '.join(registry.envs)})"
        )
        raise typer.Exit(2)
    split_cfg = cfg.synth.splits.get(split) or SplitSection(n=1)
    outcome = Sampler(registry, cfg.base.seed, cfg.synth.teacher).sample(
        split, split_cfg, [family], index
    )
    if outcome.record is None:
        console.print(f"[yellow]rejected:[/yellow] {outcome.reason}")
        raise typer.Exit(1)
    sys.stdout.write(json.dumps(outcome.record, indent=2, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    app()
