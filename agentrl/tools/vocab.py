"""Name vocabularies for tool surfaces and the partition reserved for ``heldout_tools``.

Each sample draws a tool's name, argument names, description and argument order from
these vocabularies (ToolACE-style API diversity), so a model must read the schema rather
than memorise names. A share of every vocabulary is held out: those strings appear only in
the ``heldout_tools`` split. The partition is global (a held-out string is never used for
any tool in training) and derived from a hash, so it is stable across runs and machines.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, field
from typing import Any

from agentrl.tools.schema import Surface


def _camel(words: list[str]) -> str:
    return words[0] + "".join(w.capitalize() for w in words[1:])


def _forms(phrase: str) -> list[str]:
    words = phrase.split("_")
    return [phrase] if len(words) == 1 else [phrase, _camel(words)]


@dataclass(frozen=True)
class ToolVocab:
    """Surface vocabulary of one canonical tool. Phrases are snake_case word sequences."""

    verbs: tuple[str, ...]
    nouns: tuple[str, ...] = ()
    args: dict[str, tuple[str, ...]] = field(default_factory=dict)
    descriptions: tuple[str, ...] = ()

    def tool_names(self) -> list[str]:
        phrases = list(self.verbs) + [f"{v}_{n}" for v in self.verbs for n in self.nouns]
        return [form for p in phrases for form in _forms(p)]

    def arg_names(self, arg: str) -> list[str]:
        return [form for p in (arg, *self.args.get(arg, ())) for form in _forms(p)]


def _rank(name: str) -> str:
    return hashlib.sha256(name.encode()).hexdigest()


class VocabPartition:
    """Splits every vocabulary into train and held-out strings; canonical names stay train."""

    def __init__(
        self, vocabs: dict[str, ToolVocab], canonical_args: dict[str, list[str]], share: float
    ):
        self.vocabs = vocabs
        # Canonical strings are shown whenever a split does not rename, so never held out.
        keep_tools = set(canonical_args)
        keep_args = {a for args in canonical_args.values() for a in args}
        held_tools: set[str] = set()
        held_args: set[str] = set()
        for tool, vocab in vocabs.items():
            held_tools |= self._hold(vocab.tool_names(), keep_tools, share)
            for arg in canonical_args[tool]:
                held_args |= self._hold(vocab.arg_names(arg), keep_args, share)
        self.heldout_tool_names = held_tools
        self.heldout_arg_names = held_args
        self.names: dict[str, dict[str, list[str]]] = {}
        self.args: dict[str, dict[str, dict[str, list[str]]]] = {}
        for tool, vocab in vocabs.items():
            names = vocab.tool_names()
            self.names[tool] = {
                "train": [n for n in names if n not in held_tools],
                "heldout": [n for n in names if n in held_tools],
            }
            self.args[tool] = {}
            for arg in canonical_args[tool]:
                options = vocab.arg_names(arg)
                self.args[tool][arg] = {
                    "train": [a for a in options if a not in held_args],
                    "heldout": [a for a in options if a in held_args],
                }
                if not self.args[tool][arg]["heldout"]:
                    raise ValueError(
                        f"tool '{tool}' argument '{arg}': no held-out name left; add synonyms"
                    )
            if not self.names[tool]["heldout"]:
                raise ValueError(f"tool '{tool}': no held-out name left; add verbs or nouns")

    @staticmethod
    def _hold(options: list[str], keep: set[str], share: float) -> set[str]:
        candidates = sorted((o for o in dict.fromkeys(options) if o not in keep), key=_rank)
        return set(candidates[: max(1, round(share * len(options)))])

    def has_vocab(self, tool: str) -> bool:
        return tool in self.vocabs

    def sample(
        self, rng: random.Random, tool: str, schema: dict[str, Any], *, heldout: bool, rename: bool
    ) -> Surface:
        """A surface for ``tool``; ``heldout`` draws only held-out strings."""
        canonical = Surface.canonical(schema)
        if tool not in self.vocabs or not (rename or heldout):
            return canonical
        pool = "heldout" if heldout else "train"
        name = rng.choice(self.names[tool][pool])
        args: dict[str, str] = {}
        for arg in canonical.order:
            options = [a for a in self.args[tool][arg][pool] if a not in args.values()]
            args[arg] = rng.choice(options)
        descriptions = [canonical.description, *self.vocabs[tool].descriptions]
        order = list(canonical.order)
        rng.shuffle(order)
        return Surface(name, args, rng.choice(descriptions), tuple(order))

    def to_json(self) -> dict[str, Any]:
        return {"tool_names": self.names, "arg_names": self.args}
