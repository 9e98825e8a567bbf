"""Escape attempts against the docker sandbox, in real containers: the test set-up starts
Debian's dockerd when none answers and builds the image locally (infra/sandbox_image.sh:
debootstrap + `docker import`, cached). Skipped, with the reason, only where dockerd
cannot start or the image cannot be built."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import ROOT, python_tool

from agentrl.tools.docker_sandbox import DockerSandbox
from agentrl.tools.sandbox import SandboxLimits

IMAGE = "agentrl-sandbox:latest"
FAST = SandboxLimits(cpu_s=2, wall_s=8.0, memory_mb=256, file_mb=4, processes=32)


def _docker_answers() -> bool:
    return subprocess.run(["docker", "info"], capture_output=True, timeout=30).returncode == 0


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if shutil.which("docker") is None:
        pytest.skip("no docker CLI on PATH")
    daemon = None
    if not _docker_answers():
        if shutil.which("dockerd") is None or os.geteuid() != 0:
            pytest.skip(
                "no docker daemon answers, and dockerd cannot be started (not root or not installed)"
            )
        log = tmp_path_factory.mktemp("dockerd") / "dockerd.log"
        daemon = subprocess.Popen(["dockerd"], stdout=log.open("w"), stderr=subprocess.STDOUT,
                                  start_new_session=True)  # fmt: skip
        deadline = time.time() + 60
        while not _docker_answers():
            if daemon.poll() is not None or time.time() > deadline:
                pytest.skip(f"dockerd did not start: {log.read_text()[-500:]}")
            time.sleep(1)
    built = subprocess.run(["bash", str(ROOT / "infra" / "sandbox_image.sh"), IMAGE],
                           capture_output=True, text=True, timeout=900)  # fmt: skip
    if built.returncode != 0:
        pytest.skip(f"sandbox image could not be built: {built.stderr[-500:]}")
    yield IMAGE
    if daemon is not None:
        os.killpg(daemon.pid, signal.SIGTERM)
        daemon.wait(timeout=60)


def run(image: str, code: str, limits: SandboxLimits = FAST):
    box = DockerSandbox(image, limits)
    try:
        return box.run(code), box
    finally:
        box.close()


def _containers() -> list[str]:
    out = subprocess.run(["docker", "ps", "-aq", "--filter", "name=agentrl-sandbox-"],
                         capture_output=True, text=True, check=True)  # fmt: skip
    return out.stdout.split()


def test_a_program_runs_as_nobody_and_the_container_goes(image: str) -> None:
    result, _ = run(image, "import os; print(sum(range(10)), os.getuid(), os.getgid())")
    assert result.error is None and result.stdout.split() == ["45", "65534", "65534"]
    assert _containers() == []


def test_no_network_not_even_the_host(image: str) -> None:
    server = socket.socket()
    server.bind(("0.0.0.0", 0))
    server.listen()
    port = server.getsockname()[1]
    code = (
        "import socket\n"
        "for host in ('127.0.0.1', '172.17.0.1', '1.1.1.1'):\n"
        "    try:\n"
        f"        socket.create_connection((host, {port}), timeout=2); print('CONNECTED', host)\n"
        "    except OSError as err: print('blocked', host)\n"
    )
    result, _ = run(image, code)
    server.close()
    assert "CONNECTED" not in result.stdout and result.stdout.count("blocked") == 3


def test_cannot_write_outside_tmp_nor_see_the_host(image: str) -> None:
    code = (
        "import os\n"
        "for path in ('/etc/escaped.txt', '/escaped.txt', '/usr/escaped.txt'):\n"
        "    try:\n"
        "        open(path, 'w').write('x'); print('WROTE', path)\n"
        "    except OSError as err: print('denied', type(err).__name__)\n"
        f"print('host visible' if os.path.exists({str(ROOT)!r}) else 'host hidden')\n"
        "open('/tmp/inside.txt', 'w').write('fine'); print('inside ok')\n"
    )
    result, _ = run(image, code)
    assert "WROTE" not in result.stdout and result.stdout.count("denied") == 3
    assert "host hidden" in result.stdout and "inside ok" in result.stdout


def test_secrets_of_the_host_environment_do_not_enter(image: str, monkeypatch) -> None:
    monkeypatch.setenv("AGENTRL_TEST_SECRET", "s3cret-token")
    result, _ = run(image, "import os; print(dict(os.environ))")
    assert "s3cret-token" not in result.stdout


def test_fork_bomb_is_contained_and_the_container_removed(image: str) -> None:
    started = time.perf_counter()
    result, _ = run(image, "import os\nwhile True:\n    os.fork()\n")
    assert time.perf_counter() - started < FAST.wall_s + 20
    assert result.error is not None and result.observation.startswith("Error:")
    assert _containers() == []


def test_memory_and_disk_bombs_fail(image: str) -> None:
    memory, _ = run(image, "x = bytearray(2 ** 31)\nprint('allocated')")
    assert memory.error is not None and "allocated" not in memory.stdout
    disk, _ = run(image, "open('/tmp/big', 'wb').write(b'x' * (64 * 2**20))\nprint('wrote')")
    assert disk.error is not None and "wrote" not in disk.stdout


@pytest.mark.parametrize("code", ["while True:\n    pass\n", "import time\ntime.sleep(60)\n"])
def test_endless_programs_are_stopped(image: str, code: str) -> None:
    started = time.perf_counter()
    result, _ = run(image, code)
    assert result.error in ("killed", "timeout") and result.observation.startswith("Error:")
    assert time.perf_counter() - started < FAST.wall_s + 20
    assert _containers() == []


def test_model_written_escapes_through_the_python_tool(image: str) -> None:
    from agentrl.tools.sandboxes import SandboxSpec

    tools, box, name, arg = python_tool(SandboxSpec("docker", image))
    attempts = {
        "import socket; socket.create_connection(('1.1.1.1', 53), timeout=2)": "Error:",
        "open('/etc/agentrl_owned', 'w').write('x')": "Error:",
        "import os; print(os.getuid())": "65534",
        "while True: pass": "Error:",
    }
    for code, expected in attempts.items():
        observation = tools.call(name, {arg: code})
        assert expected in observation.text, (code, observation.text)
    box.close()
    assert not Path("/etc/agentrl_owned").exists() and _containers() == []
