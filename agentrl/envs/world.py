"""Fresh worlds of entities, words and numbers, drawn per sample.

Names are built from syllables (cheap for a byte-level tokenizer to copy). A hash splits
every atom into a train world and an eval world: training splits draw only train atoms,
eval splits only eval atoms, so no entity, word or number of an eval task was ever seen in
training and success on eval cannot come from memorised facts.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable
from typing import Literal

SYLLABLES = [
    "ka",
    "ri",
    "to",
    "mo",
    "se",
    "la",
    "vi",
    "nu",
    "po",
    "te",
    "ba",
    "do",
    "fi",
    "ge",
    "ho",
    "ju",
    "le",
    "ma",
    "ne",
    "ro",
    "sa",
    "ti",
    "vo",
    "za",
    "bel",
    "dar",
    "fen",
    "gor",
    "kel",
    "lin",
    "mar",
    "nor",
    "pel",
    "ran",
    "sor",
    "tal",
    "ven",
    "wil",
    "zen",
    "dun",
]
EVAL_SHARE = 0.2

Partition = Literal["train", "eval"]


def partition_of(kind: str, value: object) -> Partition:
    """Which world an atom belongs to; stable across runs, machines and Python versions."""
    digest = hashlib.sha256(f"{kind}:{value}".encode()).digest()
    return "eval" if int.from_bytes(digest[:4], "big") / 2**32 < EVAL_SHARE else "train"


class World:
    """Draws atoms of one partition and records them (for the disjointness checks)."""

    def __init__(self, rng: random.Random, partition: Partition):
        self.rng = rng
        self.partition = partition
        self.atoms: dict[str, list[object]] = {"entity": [], "word": [], "number": []}

    def _draw(self, kind: str, make: Callable[[], object]) -> object:
        for _ in range(10_000):
            value = make()
            if partition_of(kind, value) == self.partition:
                if value not in self.atoms[kind]:
                    self.atoms[kind].append(value)
                return value
        raise ValueError(f"no {kind} of the {self.partition} world found: widen its range")

    def _syllables(self, low: int, high: int) -> str:
        return "".join(self.rng.choice(SYLLABLES) for _ in range(self.rng.randint(low, high)))

    def entity(self) -> str:
        """A capitalised name of 2-3 syllables, e.g. 'Korava'."""
        return str(self._draw("entity", lambda: self._syllables(2, 3).capitalize()))

    def lookalike(self, name: str) -> str:
        """A different entity whose name differs from ``name`` in one letter (vowel for vowel)."""

        letters = ("aeiou", "bdfgklmnprstvz")

        def near() -> str:
            i = self.rng.randrange(len(name))
            group = next((g for g in letters if name[i].lower() in g), letters[1])
            swap = self.rng.choice([c for c in group if c != name[i].lower()])
            return name[:i] + (swap.upper() if i == 0 else swap) + name[i + 1 :]

        return str(self._draw("entity", near))

    def word(self) -> str:
        """A lowercase item word of 2 syllables, e.g. 'telin'."""
        return str(self._draw("word", lambda: self._syllables(2, 2)))

    def number(self, low: int, high: int) -> int:
        return int(self._draw("number", lambda: self.rng.randint(low, high)))  # type: ignore[arg-type]
