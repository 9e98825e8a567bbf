"""The ``docker`` sandbox: one container per episode for model-written Python.

The container starts on the episode's first program and is removed when the episode ends
(or when its handle is collected): no network (``--network none``), a read-only root, a
tmpfs working directory, user nobody, every capability dropped, no new privileges, and
memory, process-count, CPU and file-size limits. Each program runs with ``docker exec``
under a wall timeout; a program that overruns it takes the container down with it (the
next program gets a fresh one). The image needs ``python3`` on its PATH; registry pulls
are not assumed, so build it locally (``infra/``).
"""

from __future__ import annotations

import shutil
import subprocess
import uuid
import weakref

from agentrl.tools.sandbox import (
    DEFAULT_LIMITS,
    NOBODY,
    SandboxLimits,
    SandboxResult,
    SandboxUnavailable,
)


def _remove(name: str) -> None:
    subprocess.run(["docker", "rm", "-f", name], capture_output=True, timeout=60, check=False)


class DockerSandbox:
    def __init__(self, image: str, limits: SandboxLimits = DEFAULT_LIMITS):
        self.image, self.limits = image, limits
        self.name: str | None = None
        self._finalizer: weakref.finalize | None = None

    def _start(self) -> str:
        if shutil.which("docker") is None:
            raise SandboxUnavailable("the docker sandbox needs the docker CLI; none on PATH")
        name = f"agentrl-sandbox-{uuid.uuid4().hex[:12]}"
        limits = self.limits
        command = ["docker", "run", "-d", "--rm", "--name", name, "--network", "none"]
        command += ["--read-only", "--tmpfs", f"/tmp:size={limits.file_mb}m,mode=1777"]
        command += ["--workdir", "/tmp", "--user", f"{NOBODY}:{NOBODY}", "--cap-drop", "ALL"]
        command += ["--security-opt", "no-new-privileges", "--cpus", "1"]
        command += ["--memory", f"{limits.memory_mb}m", "--memory-swap", f"{limits.memory_mb}m"]
        command += ["--pids-limit", str(limits.processes)]
        command += ["--ulimit", f"fsize={limits.file_mb * 2**20}"]
        command += ["--ulimit", f"cpu={limits.cpu_s}", "--env", "HOME=/tmp"]
        command += [self.image, "sleep", "infinity"]
        started = subprocess.run(command, capture_output=True, text=True, timeout=120)
        if started.returncode != 0:
            raise SandboxUnavailable(
                f"docker run {self.image} failed: {started.stderr.strip()[:300]}"
            )
        self.name = name
        self._finalizer = weakref.finalize(self, _remove, name)
        return name

    def run(self, code: str) -> SandboxResult:
        name = self.name or self._start()
        command = ["docker", "exec", name, "python3", "-I", "-S", "-c", code]
        try:
            done = subprocess.run(
                command,
                capture_output=True,
                text=True,
                errors="replace",
                timeout=self.limits.wall_s,
            )
        except subprocess.TimeoutExpired:
            self.close()  # kills whatever the program left running
            return SandboxResult("", "", None, "timeout")
        status = done.returncode
        if status > 128:  # docker exec reports a signalled program as 128 + signal
            status = 128 - status
        error = None if status == 0 else ("killed" if status < 0 else "exit")
        limit = self.limits.output_chars
        return SandboxResult(done.stdout[:limit], done.stderr[-limit:], status, error)

    def close(self) -> None:
        if self._finalizer is not None:
            self._finalizer()  # runs _remove once
        self.name, self._finalizer = None, None
