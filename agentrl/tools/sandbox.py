"""Run model-written Python in a separate, limited process (the ``subprocess`` sandbox;
``docker_sandbox.py`` is the container one; ``sandboxes.py`` opens the one a spec names).

Each run gets new namespaces from ``unshare``: a network namespace with no interfaces but
loopback (no network), a PID namespace (nothing outlives the run), and a mount namespace in which a small tmpfs is mounted on /tmp
and used as the working directory (files written there vanish with the run; the rest of
the filesystem is only writable where user nobody may write). The program runs as user
nobody (``setpriv``, all capabilities dropped) with a scrubbed environment, under rlimits
on CPU time, address space, file size and process count, and a wall-clock timeout that
kills its whole session. Where the kernel refuses the namespaces, :func:`run_python`
raises :class:`SandboxUnavailable` naming why, instead of running unconfined.
"""

from __future__ import annotations

import contextlib
import functools
import os
import resource
import shlex
import signal
import subprocess
from dataclasses import dataclass

NOBODY = 65534


@dataclass(frozen=True)
class SandboxLimits:
    cpu_s: int = 5
    memory_mb: int = 512
    file_mb: int = 16  # also the size of the tmpfs working directory
    processes: int = 32
    wall_s: float = 10.0
    output_chars: int = 4000
    interpreter: str = "/usr/bin/python3"  # readable by user nobody, unlike a venv under /root


DEFAULT_LIMITS = SandboxLimits()


@dataclass(frozen=True)
class SandboxResult:
    stdout: str
    stderr: str
    returncode: int | None
    error: str | None  # None, "timeout", "killed" (a limit's signal), "exit" (non-zero)

    @property
    def observation(self) -> str:
        """What the model reads back."""
        if self.error == "timeout":
            return "Error: the program ran past its time limit and was stopped."
        if self.error == "killed":
            return f"Error: the program was stopped by a resource limit (signal {-(self.returncode or 0)})."
        text = self.stdout + (f"\n{self.stderr}" if self.stderr else "")
        return text if self.error is None else f"Error: exit status {self.returncode}\n{text}"


class SandboxUnavailable(RuntimeError):
    """The kernel or the user lacks what the sandbox needs; nothing was run."""


def _command(code: str, limits: SandboxLimits) -> list[str]:
    inner = (
        f"mount -t tmpfs -o size={limits.file_mb}m,mode=1777 tmpfs /tmp && cd /tmp && "
        f"setpriv --reuid={NOBODY} --regid={NOBODY} --clear-groups --inh-caps=-all "
        f"{shlex.quote(limits.interpreter)} -I -S -c {shlex.quote(code)}"
    )
    # --pid: the shell is the namespace's init, so when it dies the kernel kills every
    # process left in the namespace (a fork bomb's children included)
    return ["unshare", "--net", "--mount", "--pid", "--mount-proc", "--fork", "sh", "-c", inner]


@functools.cache
def unavailable_reason(interpreter: str = "/usr/bin/python3") -> str | None:
    """Why the sandbox cannot run here, or None when it can (probed once)."""
    if os.geteuid() != 0:
        return "the subprocess sandbox needs root (namespaces, tmpfs, setpriv); use docker"
    probe = subprocess.run(
        _command("print('ok')", SandboxLimits(interpreter=interpreter)),
        capture_output=True,
        text=True,
        timeout=30,
    )
    if probe.returncode != 0 or probe.stdout.strip() != "ok":
        return f"sandbox probe failed: {probe.stderr.strip()[:300]}"
    return None


def _limit(limits: SandboxLimits) -> None:
    os.setsid()
    for kind, value in (
        (resource.RLIMIT_CPU, limits.cpu_s),
        (resource.RLIMIT_AS, limits.memory_mb * 2**20),
        (resource.RLIMIT_FSIZE, limits.file_mb * 2**20),
        (resource.RLIMIT_NPROC, limits.processes),
        (resource.RLIMIT_CORE, 0),
    ):
        resource.setrlimit(kind, (value, value))


def run_python(code: str, limits: SandboxLimits = DEFAULT_LIMITS) -> SandboxResult:
    reason = unavailable_reason(limits.interpreter)
    if reason is not None:
        raise SandboxUnavailable(reason)
    proc = subprocess.Popen(
        _command(code, limits),
        cwd="/",
        env={"PATH": "/usr/bin:/bin", "HOME": "/tmp", "LANG": "C.UTF-8"},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
        preexec_fn=functools.partial(_limit, limits),
    )
    try:
        stdout, stderr = proc.communicate(timeout=limits.wall_s)
        timed_out = False
    except subprocess.TimeoutExpired:
        timed_out = True
    # the whole session goes: a fork bomb's children too
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    if timed_out:
        proc.communicate()
        return SandboxResult("", "", None, "timeout")
    status = proc.returncode
    if status > 128:  # the shell reports a signalled program as 128 + signal
        status = 128 - status
    error = None if status == 0 else ("killed" if status < 0 else "exit")
    return SandboxResult(
        stdout[: limits.output_chars], stderr[-limits.output_chars :], status, error
    )


class SubprocessSandbox:
    """The per-episode handle of the subprocess sandbox: each program is its own run."""

    def __init__(self, limits: SandboxLimits = DEFAULT_LIMITS):
        self.limits = limits

    def run(self, code: str) -> SandboxResult:
        return run_python(code, self.limits)

    def close(self) -> None:
        pass
