"""MLflow tracking: one run per stage execution, with tags, lineage and dataset inputs.

The URI comes from ``tracking.uri``, else ``$MLFLOW_TRACKING_URI``, else
``sqlite:///mlflow.db`` at the repository root. The server is checked before any work is
done. Lineage lives in MLflow only, so that DVC-tracked outputs stay a function of their
inputs (bitwise across runs): a producing stage tags its run ``lineage.<digest>`` for the
content digest of every output it writes (:meth:`StageRun.record_output`); a consuming
stage digests each input, finds the newest finished run carrying that tag, tags it as
``upstream.<name>`` and logs the input as an MLflow dataset with its digest.
Wall-clock figures (seconds, tokens per second, where a run resumed from) go to MLflow
and never into DVC outputs (agentrl/outputs.py). ``AGENTRL_PIPELINE_RUN_ID`` nests
stage runs under a pipeline run (the Prefect flow sets it); run ids never enter params.yaml.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentrl.config import TrackingSection, digest
from agentrl.errors import ServerUnreachable

PARENT_ENV = "AGENTRL_PIPELINE_RUN_ID"
LINEAGE_TAG = "lineage."


class TrackingUnavailable(ServerUnreachable):
    """The tracking server cannot be reached; raised before a stage does any work."""


def repo_root() -> Path:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True, check=True
        )
        return Path(out.stdout.strip())
    except (subprocess.CalledProcessError, FileNotFoundError):
        return Path.cwd()


def tracking_uri(cfg: TrackingSection) -> str:
    if cfg.uri:
        return cfg.uri
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{repo_root() / 'mlflow.db'}"


def check_reachable(uri: str) -> None:
    """Fail fast, with the fix, when the tracking backend cannot be used."""
    if uri.startswith(("http://", "https://")):
        import httpx

        try:
            response = httpx.get(uri.rstrip("/") + "/health", timeout=5.0)
            if response.status_code == 200:
                return
            problem = f"HTTP {response.status_code}"
        except httpx.HTTPError as err:
            problem = f"{type(err).__name__}: {err}"
        raise TrackingUnavailable(
            f"MLflow tracking server {uri} is not reachable ({problem}). Start it "
            f"(`mlflow server --host 127.0.0.1 --port 5000`), or unset MLFLOW_TRACKING_URI "
            f"to use the local sqlite:///mlflow.db."
        )
    if uri.startswith("sqlite:///"):
        parent = Path(uri.removeprefix("sqlite:///")).parent
        if not (parent.is_dir() and os.access(parent, os.W_OK)):
            raise TrackingUnavailable(
                f"MLflow store {uri}: directory {parent} is missing or not writable."
            )


def git_state() -> tuple[str, bool]:
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = bool(
            subprocess.run(
                ["git", "status", "--porcelain"], capture_output=True, text=True, check=True
            ).stdout.strip()
        )
        return commit, dirty
    except (subprocess.CalledProcessError, FileNotFoundError):
        return "unknown", True


def content_digest(path: Path, skip: frozenset[str] = frozenset()) -> str:
    """SHA-256 over relative paths and bytes of every file under ``path`` but those whose
    relative path is in ``skip``."""
    h = hashlib.sha256()
    files = (
        [path]
        if path.is_file()
        else sorted(
            p for p in path.rglob("*") if p.is_file() and str(p.relative_to(path)) not in skip
        )
    )
    for file in files:
        h.update(str(file.relative_to(path) if path.is_dir() else file.name).encode())
        with file.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()


def flatten(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict) and value:
            out |= flatten(value, f"{prefix}{key}.")
        else:
            out[f"{prefix}{key}"] = json.dumps(value) if isinstance(value, list | dict) else value
    return out


@dataclass
class StageRun:
    """Handle of the active stage run, given to the stage body."""

    run_id: str
    stage: str
    uri: str

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        import mlflow

        mlflow.log_metrics({k: float(v) for k, v in metrics.items()}, step=step)

    def log_dict(self, data: Any, artifact_file: str) -> None:
        import mlflow

        mlflow.log_dict(data, artifact_file)

    def log_artifact(self, path: Path, artifact_path: str | None = None) -> None:
        import mlflow

        mlflow.log_artifact(str(path), artifact_path)

    def record_output(self, path: Path) -> str:
        """Tag this run as the producer of ``path``'s content; return its digest."""
        import mlflow

        found = content_digest(path)[:32]
        mlflow.set_tag(f"{LINEAGE_TAG}{found}", self.stage)
        return found


def producer_run(digest32: str) -> str | None:
    """The newest finished run, in any experiment, that recorded an output with this content
    digest (equal content is the same output, whoever made it)."""
    import mlflow

    runs = mlflow.search_runs(
        search_all_experiments=True,
        filter_string=f"tags.`{LINEAGE_TAG}{digest32}` != '' and attributes.status = 'FINISHED'",
        order_by=["attributes.start_time DESC"],
        max_results=1,
        output_format="list",
    )
    return runs[0].info.run_id if runs else None


@contextmanager
def stage_run(
    stage: str,
    cfg: TrackingSection,
    params: dict[str, Any],
    inputs: dict[str, Path] | None = None,
) -> Iterator[StageRun]:
    """One MLflow run for one stage execution; ends FAILED if the body raises.

    ``params`` are the stage's params sections (logged flattened, digested into a tag);
    ``inputs`` maps a name to an upstream output (directory or file): each is logged as a
    dataset input with its digest, and the run that produced that content is tagged as
    ``upstream.<name>``.
    """
    uri = tracking_uri(cfg)
    check_reachable(uri)
    import mlflow
    from mlflow.data.meta_dataset import MetaDataset
    from mlflow.data.sources import LocalArtifactDatasetSource

    mlflow.set_tracking_uri(uri)
    mlflow.set_experiment(cfg.experiment)
    commit, dirty = git_state()
    tags = {
        "stage": stage,
        "git_commit": commit,
        "git_dirty": str(dirty).lower(),
        "params_digest": digest(params),
    }
    if os.environ.get("DVC_EXP_NAME"):
        tags["dvc_exp_name"] = os.environ["DVC_EXP_NAME"]
    if os.environ.get(PARENT_ENV):
        tags["mlflow.parentRunId"] = os.environ[PARENT_ENV]
    datasets = []
    for name, path in (inputs or {}).items():
        found = content_digest(path)[:32]
        upstream = producer_run(found)
        if upstream is not None:
            tags[f"upstream.{name}"] = upstream
        source = LocalArtifactDatasetSource(str(path.resolve()))
        datasets.append(MetaDataset(source=source, name=name, digest=found))
    with mlflow.start_run(run_name=stage, tags=tags) as run:
        mlflow.log_params(flatten(params))
        for dataset in datasets:
            mlflow.log_input(dataset, context="input")
        yield StageRun(run.info.run_id, stage, uri)
