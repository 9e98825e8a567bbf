"""Which sandbox an episode's code-running tools get: :class:`SandboxSpec` says it
(``harness.sandbox`` and ``harness.sandbox_image``), :func:`open_sandbox` opens one.

The spec travels with the tools (``Registry.bind`` hands it to each toolbox), so two
harnesses in one process may use different sandboxes and nothing is set process-wide.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agentrl.tools.docker_sandbox import DockerSandbox
from agentrl.tools.sandbox import DEFAULT_LIMITS, SandboxLimits, SubprocessSandbox

KINDS = ("subprocess", "docker")


@dataclass(frozen=True)
class SandboxSpec:
    kind: str = "subprocess"
    image: str = "agentrl-sandbox:latest"
    limits: SandboxLimits = field(default=DEFAULT_LIMITS)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown sandbox '{self.kind}' ({' | '.join(KINDS)})")


def open_sandbox(spec: SandboxSpec) -> Any:
    """A sandbox for one episode, of the kind ``spec`` names; ``close()`` it when done."""
    if spec.kind == "docker":
        return DockerSandbox(spec.image, spec.limits)
    return SubprocessSandbox(spec.limits)


DEFAULT_SANDBOX = SandboxSpec()
