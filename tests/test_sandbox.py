"""Escape attempts against the subprocess sandbox: each is contained, and the model reads
an error. Skipped, with the reason, only where the sandbox cannot run (not root)."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from pathlib import Path

import pytest
from conftest import python_tool

from agentrl.tools.sandbox import SandboxLimits, run_python, unavailable_reason

REASON = unavailable_reason()
pytestmark = pytest.mark.skipif(REASON is not None, reason=f"sandbox unavailable: {REASON}")
FAST = SandboxLimits(cpu_s=2, wall_s=5.0, memory_mb=256, file_mb=4, processes=16)


def test_a_program_runs_and_prints() -> None:
    result = run_python("print(sum(range(10)))", FAST)
    assert result.error is None and result.observation.strip() == "45"


def test_no_network_not_even_loopback() -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    code = (
        "import socket\n"
        f"for host in ('127.0.0.1', '1.1.1.1'):\n"
        "    try:\n"
        f"        socket.create_connection((host, {port}), timeout=2); print('CONNECTED', host)\n"
        "    except OSError as err: print('blocked', host, err.errno)\n"
    )
    result = run_python(code, FAST)
    server.close()
    assert "CONNECTED" not in result.stdout and result.stdout.count("blocked") == 2


def test_environment_secrets_are_scrubbed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTRL_TEST_SECRET", "s3cret-token")
    result = run_python("import os; print(dict(os.environ))", FAST)
    assert "s3cret-token" not in result.stdout and "AGENTRL_TEST_SECRET" not in result.stdout


def test_cannot_write_outside_its_working_directory(tmp_path: Path) -> None:
    target = tmp_path / "escaped.txt"
    code = (
        "import os\n"
        f"for path in ({str(target)!r}, '/etc/escaped.txt', {str(Path.cwd() / 'escaped.txt')!r}):\n"
        "    try:\n"
        "        open(path, 'w').write('x'); print('WROTE', path)\n"
        "    except OSError as err: print('denied', type(err).__name__)\n"
        "open('inside.txt', 'w').write('fine'); print('inside ok')\n"
    )
    result = run_python(code, FAST)
    assert "WROTE" not in result.stdout and "inside ok" in result.stdout
    assert not target.exists() and not Path("/etc/escaped.txt").exists()
    assert not (Path.cwd() / "escaped.txt").exists()


def nobody_process_states() -> list[str]:
    """State letters of the processes user nobody runs now (read from /proc)."""
    states = []
    for status in Path("/proc").glob("[0-9]*/status"):
        with contextlib.suppress(OSError):
            fields = dict(
                line.split(":", 1) for line in status.read_text().splitlines() if ":" in line
            )
            if fields["Uid"].split()[0] == "65534":
                states.append(fields["State"].strip())
    return states


def test_fork_bomb_is_contained_and_leaves_nothing_behind() -> None:
    started = time.perf_counter()
    result = run_python("import os\nwhile True:\n    os.fork()\n", FAST)
    assert time.perf_counter() - started < FAST.wall_s + 5
    assert result.error is not None and result.observation.startswith("Error:")
    for _ in range(50):  # killed processes may take a moment to be reaped
        states = nobody_process_states()
        if all(state.startswith("Z") for state in states):
            break
        time.sleep(0.1)
    assert all(state.startswith("Z") for state in states), states


def test_memory_bomb_fails_with_an_error() -> None:
    result = run_python("x = bytearray(2 ** 31)\nprint('allocated')", FAST)
    assert result.error == "exit" and "MemoryError" in result.observation


def test_disk_bomb_is_bounded() -> None:
    result = run_python("open('big', 'wb').write(b'x' * (64 * 2**20))\nprint('wrote')", FAST)
    assert result.error is not None and "wrote" not in result.stdout


@pytest.mark.parametrize(
    ("code", "error"),
    [("while True:\n    pass\n", "killed"), ("import time\ntime.sleep(60)\n", "timeout")],
)
def test_endless_programs_are_stopped(code: str, error: str) -> None:
    started = time.perf_counter()
    result = run_python(code, FAST)
    assert result.error == error and result.observation.startswith("Error:")
    assert time.perf_counter() - started < FAST.wall_s + 3


def test_the_program_runs_as_nobody() -> None:
    result = run_python("import os; print(os.getuid(), os.getgid())", FAST)
    assert result.stdout.split() == ["65534", "65534"]
    assert os.geteuid() == 0  # the test itself is the root that could have leaked


PYTHON_ENV = "agentrl.envs.families.python_exec:PythonEnv"


def test_python_family_samples_are_verified_by_running_the_oracle_code() -> None:
    from agentrl.config import SplitSection, TeacherSection
    from agentrl.envs.registry import Registry
    from agentrl.synth.sampler import Sampler

    sampler = Sampler(Registry([PYTHON_ENV]), 0, TeacherSection())
    outcomes = [sampler.sample("sft", SplitSection(n=1), ["python"], i) for i in range(6)]
    records = [o.record for o in outcomes if o.record is not None]
    assert len(records) == 6, [o.reason for o in outcomes]
    for record in records:
        (call, result) = (
            m for m in record["messages"] if m.get("tool_calls") or m["role"] == "tool"
        )
        assert "print(" in json.dumps(call["tool_calls"][0]["function"]["arguments"])
        assert result["content"].strip().lstrip("-").isdigit()


def test_model_written_escapes_through_the_python_tool_are_error_observations() -> None:
    tools, box, name, arg = python_tool()
    attempts = {
        "import socket; socket.create_connection(('1.1.1.1', 53), timeout=2)": "Error:",
        "import os; print(os.environ.get('AGENTRL_SECRET', 'no secret'))": "no secret",
        "open('/etc/agentrl_owned', 'w').write('x')": "Error:",
        "while True: pass": "Error:",
        "pass": "printed nothing",
    }
    os.environ["AGENTRL_SECRET"] = "hunter2"
    try:
        for code, expected in attempts.items():
            observation = tools.call(name, {arg: code})
            assert expected in observation.text, (code, observation.text)
            assert "hunter2" not in observation.text
    finally:
        del os.environ["AGENTRL_SECRET"]
        box.close()
    assert not Path("/etc/agentrl_owned").exists()
