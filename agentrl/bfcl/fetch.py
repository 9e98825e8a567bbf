"""Fetch BFCL's question and answer files from the ``bfcl-eval`` wheel on PyPI.

The wheel is downloaded with ``pip download --no-deps`` (none of its heavy dependencies,
and its code is never imported), checked against the pinned sha256, and only the data
files of the wanted categories are extracted: ``<category>.jsonl`` (questions with their
function descriptions) and ``<category>.answers.jsonl`` (possible answers), plus
``source.json`` naming the package and digest. The bfcl stage writes them to data/bfcl,
which DVC caches, so the network is needed once per pin.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

from agentrl.atomic import atomic_dir
from agentrl.config import BFCLSection
from agentrl.errors import StageError
from agentrl.pinned import pinned_wheel

# BFCL v4 file stems of the non-live Python AST categories
FILES = {"simple": "simple_python", "multiple": "multiple", "parallel": "parallel"}


def _wheel_member(names: list[str], suffix: str) -> str:
    found = [n for n in names if n.endswith(suffix)]
    if len(found) != 1:
        raise StageError(f"bfcl wheel: expected one file ending {suffix!r}, found {found}")
    return found[0]


def extract(archive: zipfile.ZipFile, cfg: BFCLSection, out: Path) -> dict[str, int]:
    """Write the categories' files from the wheel ``archive`` into ``out`` (atomically)."""
    counts = {}
    with atomic_dir(out) as tmp:
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
        source = {"package": cfg.package, "wheel": Path(str(archive.filename)).name}
        source |= {"sha256": cfg.sha256, "questions": counts}
        (tmp / "source.json").write_text(json.dumps(source, indent=2))
    return counts


def fetch(cfg: BFCLSection, out: Path) -> dict[str, int]:
    """Download the pinned wheel (no dependencies) and extract its data into ``out``."""
    with pinned_wheel(cfg.package, cfg.sha256, "eval.bfcl.sha256") as archive:
        return extract(archive, cfg, out)


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
