"""Which environments exist: the built-in families plus plugins named by dotted path.

The registry also owns the tool catalogue (every canonical tool once, with its owner and
vocabulary), the held-out name partition, and rebuilding a :class:`ToolSet` from the JSON
``env`` block of a sample, which is how RL and eval re-execute tools after synthesis.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agentrl.config import ConfigError, import_plugin
from agentrl.envs.base import Environment, ToolBox
from agentrl.envs.families.calculator import CalculatorEnv
from agentrl.envs.families.compose import ComposeEnv
from agentrl.envs.families.convert import ConvertEnv
from agentrl.envs.families.doc_search import DocSearchEnv
from agentrl.envs.families.knowledge_base import KnowledgeBaseEnv
from agentrl.envs.families.store import StoreEnv
from agentrl.tools.executor import ToolSet
from agentrl.tools.sandboxes import DEFAULT_SANDBOX, SandboxSpec
from agentrl.tools.schema import Surface, canonical_schema
from agentrl.tools.vocab import ToolVocab, VocabPartition

BUILTIN: tuple[type[Environment], ...] = (
    CalculatorEnv,
    KnowledgeBaseEnv,
    DocSearchEnv,
    StoreEnv,
    ConvertEnv,
    ComposeEnv,
)


def load_registry(
    envs: list[str], heldout_share: float, params_file: str = "params.yaml"
) -> Registry:
    """The registry of ``synth.envs`` plugins: a plugin that does not load is a ConfigError
    naming the file and key (every entry point reports it as one line, exit 2)."""
    try:
        return Registry(envs, heldout_share)
    except PluginError as err:
        raise ConfigError(f"{params_file}: synth.envs: {err}") from err


class PluginError(ValueError):
    """A plugin path that cannot be imported or is not an Environment."""


def load_plugin(path: str) -> type[Environment]:
    try:
        cls = import_plugin(path)
    except ValueError as err:
        raise PluginError(str(err)) from err
    if not (isinstance(cls, type) and issubclass(cls, Environment)):
        raise PluginError(f"'{path}' is not a subclass of agentrl.envs.base.Environment")
    return cls


class Registry:
    """Environments by family name, their tools, and the vocabulary partition."""

    def __init__(self, plugins: list[str] = (), heldout_share: float = 0.25):  # type: ignore[assignment]
        self.envs: dict[str, Environment] = {}
        for cls in (*BUILTIN, *(load_plugin(p) for p in plugins)):
            if cls.name in self.envs:
                raise PluginError(f"family '{cls.name}' is defined twice")
            self.envs[cls.name] = cls()
        self.owner: dict[str, str] = {}  # canonical tool -> family that runs it as a distractor
        self.function: dict[str, Callable[..., Any]] = {}
        vocabs: dict[str, ToolVocab] = {}
        for family, env in self.envs.items():
            for tool in env.toolbox.TOOLS:
                func = getattr(env.toolbox, tool)
                if tool in self.function and self.function[tool] is not func:
                    raise PluginError(
                        f"tool '{tool}' of family '{family}' clashes with another family's tool"
                    )
                self.owner.setdefault(tool, family)
                self.function[tool] = func
                if tool in env.vocab:
                    vocabs[tool] = env.vocab[tool]
        canonical_args = {
            t: list(canonical_schema(f)["parameters"].get("properties", {}))
            for t, f in self.function.items()
        }
        self.partition = VocabPartition(
            vocabs, {t: canonical_args[t] for t in vocabs}, heldout_share
        )

    def schema(self, tool: str) -> dict[str, Any]:
        return canonical_schema(self.function[tool])

    def bind(
        self, env_block: dict[str, Any], sandbox: SandboxSpec = DEFAULT_SANDBOX
    ) -> tuple[ToolSet, ToolBox]:
        """Rebuild an episode's tools from a sample's ``env`` block: (tool set, own toolbox);
        code-running tools open the sandbox ``sandbox`` names."""
        family = env_block["family"]
        if family not in self.envs:
            raise KeyError(f"unknown family '{family}'; add its plugin to synth.envs")
        box = self.envs[family].bind(env_block["state"], sandbox)
        functions = box.functions()
        for tool in env_block["surfaces"]:
            if tool not in functions:
                distractor = self.envs[self.owner[tool]].bind({}, sandbox)
                functions = distractor.functions() | functions
        surfaces = {tool: Surface.from_json(s) for tool, s in env_block["surfaces"].items()}
        return ToolSet(functions, surfaces), box

    def catalog(self) -> dict[str, Any]:
        """Every canonical tool (schema, owning family) and the surface vocabularies."""
        tools = {
            t: {"family": self.owner[t], "schema": self.schema(t)} for t in sorted(self.function)
        }
        return {"tools": tools, "vocabulary": self.partition.to_json()}
