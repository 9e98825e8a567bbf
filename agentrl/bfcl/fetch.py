"""Fetch BFCL's question and answer files from the ``bfcl-eval`` wheel on PyPI.

The wheel is downloaded with ``pip download --no-deps`` (none of its heavy dependencies,
and its code is never imported), checked against the pinned sha256, and only the data
files of the wanted categories are extracted: ``<category>.jsonl`` (questions with their
function descriptions) and ``<category>.answers.jsonl`` (possible answers), plus
``source.json`` naming the package and digest. The bfcl stage writes them to data/bfcl,
which DVC caches, so the network is needed once per pin.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from agentrl.atomic import atomic_dir
from agentrl.config import BFCLSection
from agentrl.errors import StageError

# BFCL v4 file stems of the non-live Python AST categories
FILES = {"simple": "simple_python", "multiple": "multiple", "parallel": "parallel"}


def _wheel_member(names: list[str], suffix: str) -> str:
    found = [n for n in names if n.endswith(suffix)]
    if len(found) != 1:
        raise StageError(f"bfcl wheel: expected one file ending {suffix!r}, found {found}")
    return found[0]


def extract(wheel: Path, cfg: BFCLSection, out: Path) -> dict[str, int]:
    """Write the categories' files from ``wheel`` into ``out`` (atomically); counts."""
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    if digest != cfg.sha256:
        raise StageError(
            f"{wheel.name}: sha256 {digest} differs from eval.bfcl.sha256 {cfg.sha256}"
        )
    counts = {}
    with zipfile.ZipFile(wheel) as archive, atomic_dir(out) as tmp:
        names = archive.namelist()
        for category in cfg.categories:
            stem = FILES[category]
            for kind, suffix in (
                ("", f"data/BFCL_v4_{stem}.json"),
                (".answers", f"data/possible_answer/BFCL_v4_{stem}.json"),
            ):
                lines = archive.read(_wheel_member(names, suffix)).decode().splitlines()
                rows = [json.loads(line) for line in lines if line.strip()]
                (tmp / f"{category}{kind}.jsonl").write_text(
                    "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows)
                )
                counts[category] = len(rows)
        source = {"package": cfg.package, "wheel": wheel.name, "sha256": digest}
        (tmp / "source.json").write_text(json.dumps(source | {"questions": counts}, indent=2))
    return counts


def fetch(cfg: BFCLSection, out: Path) -> dict[str, int]:
    """Download the pinned wheel (no dependencies) and extract its data into ``out``."""
    with tempfile.TemporaryDirectory() as tmp:
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet"]
        command += ["--disable-pip-version-check", "-d", tmp, cfg.package]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise StageError(
                f"pip download {cfg.package} failed (eval.bfcl.package): {done.stderr[-500:]}"
            )
        wheels = list(Path(tmp).glob("*.whl"))
        if len(wheels) != 1:
            raise StageError(f"pip download {cfg.package}: expected one wheel, got {wheels}")
        return extract(wheels[0], cfg, out)


def load(data: Path, category: str) -> list[tuple[dict, dict]]:
    """(question, possible answer) pairs of a category, in file order."""
    questions = [json.loads(line) for line in (data / f"{category}.jsonl").open()]
    answers = {
        row["id"]: row for row in map(json.loads, (data / f"{category}.answers.jsonl").open())
    }
    missing = [q["id"] for q in questions if q["id"] not in answers]
    if missing:
        raise StageError(f"{data}/{category}.answers.jsonl: no answer for {missing[:3]}")
    return [(q, answers[q["id"]]) for q in questions]
