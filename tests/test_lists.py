"""One definition per list: everything that names the members of a list (config choices,
registries, dvc.yaml's plot columns) derives from it or is tied to it here."""

from __future__ import annotations

from pathlib import Path
from typing import get_args

import pytest
import yaml
from conftest import ROOT

from agentrl.config import CONTEXT_STRATEGIES, HarnessSection, RLSection
from agentrl.harness.build import ENGINES
from agentrl.outputs import write_plot
from agentrl.rl.advantages import ESTIMATORS, SCALES
from agentrl.rl.sources import SOURCE_MIXES, SOURCES, group_counts


def test_context_strategies_are_the_harness_choices_and_the_horizon_plot() -> None:
    assert get_args(HarnessSection.model_fields["context"].annotation) == CONTEXT_STRATEGIES
    plots = yaml.safe_load((ROOT / "dvc.yaml").read_text())["plots"]
    (horizon,) = [p for p in plots if "horizon" in str(p)]
    (columns,) = next(iter(horizon.values()))["y"].values()
    assert tuple(columns) == CONTEXT_STRATEGIES


def test_engines_are_the_harness_choices() -> None:
    assert get_args(HarnessSection.model_fields["engine"].annotation) == tuple(ENGINES)


def test_advantage_estimators_and_scales_are_the_rl_choices() -> None:
    assert get_args(RLSection.model_fields["advantage"].annotation) == tuple(ESTIMATORS)
    (scales, _) = get_args(RLSection.model_fields["scale"].annotation)
    assert get_args(scales) == SCALES


def test_rollout_sources_are_the_rl_choices_and_name_every_source() -> None:
    assert get_args(RLSection.model_fields["rollouts"].annotation) == tuple(SOURCE_MIXES)
    named = {
        source for mix in SOURCE_MIXES for source in group_counts(mix, 4, 0.5, anchor_share=0.5)
    }
    assert named == set(SOURCES)


def test_a_plot_row_with_an_unknown_column_is_an_error(tmp_path: Path) -> None:
    target = tmp_path / "p.tsv"
    write_plot(target, [{"step": 1, "loss": 0.5}, {"step": 2}], ("step", "loss", "time_x_s"))
    assert target.read_text() == "step\tloss\n1\t0.5\n2\t\n"  # wall clock left to MLflow
    with pytest.raises(ValueError, match=r"p2\.tsv: rows carry columns the plot does not name"):
        write_plot(tmp_path / "p2.tsv", [{"step": 1, "lost": 0.5}], ("step", "loss"))
    assert not (tmp_path / "p2.tsv").exists()
