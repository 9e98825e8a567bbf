"""infra/: the compose stack parses under Docker Compose v2 with every port on 127.0.0.1,
and the Dockerfiles pass hadolint."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import compose
import pytest
from conftest import BIN, ROOT

COMPOSE = (
    Path(compose.__file__).parent / "docker-compose"
)  # the binary: its wrapper drops exit codes
DOCKERFILES = sorted((ROOT / "infra" / "docker").glob("*.Dockerfile"))


def compose_config(*args: str) -> dict:
    done = subprocess.run(
        [str(COMPOSE), "-f", str(ROOT / "infra" / "docker-compose.yml"), *args,
         "config", "--format", "json"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_compose_stack_binds_every_port_to_localhost() -> None:
    cpu = compose_config()
    assert set(cpu["services"]) == {"postgres", "mlflow", "prefect-server", "prefect-services",
                                    "prefect-worker"}  # fmt: skip
    gpu = compose_config("--profile", "gpu")
    assert {"vllm", "gpu-worker"} <= set(gpu["services"])
    published = [(name, port) for name, service in gpu["services"].items()
                 for port in service.get("ports", [])]  # fmt: skip
    assert {name for name, _ in published} == {"mlflow", "prefect-server", "vllm"}
    assert all(port["host_ip"] == "127.0.0.1" for _, port in published), published
    mlflow = " ".join(gpu["services"]["mlflow"]["command"])
    assert "postgresql://" in mlflow and "--artifacts-destination /mlartifacts" in mlflow
    assert gpu["services"]["vllm"]["environment"]["VLLM_SERVER_DEV_MODE"] == "1"


def test_a_broken_compose_file_is_refused(tmp_path: Path) -> None:
    broken = tmp_path / "docker-compose.yml"
    broken.write_text("services:\n  web:\n    image: x\n    ports: [{target: nope}]\n")
    done = subprocess.run([str(COMPOSE), "-f", str(broken), "config"], capture_output=True)
    assert done.returncode != 0


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_dockerfiles_pass_hadolint(dockerfile: Path) -> None:
    done = subprocess.run(
        [str(BIN / "hadolint"), "--config", str(ROOT / "infra" / ".hadolint.yaml"), str(dockerfile)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


def test_hadolint_catches_a_bad_dockerfile(tmp_path: Path) -> None:
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN cd /tmp && pip install requests\n")
    done = subprocess.run([str(BIN / "hadolint"), str(bad)], capture_output=True, text=True)
    assert done.returncode != 0 and "DL3007" in done.stdout
