"""Tools: a Python function with type hints and a Google docstring is a tool.

``schema`` derives JSON schemas (via transformers' ``get_json_schema``) and applies a
randomised surface; ``vocab`` holds name vocabularies and the held-out partition;
``executor`` validates and runs calls, turning every failure into an observation.
"""

from agentrl.tools.executor import Observation, ToolError, ToolSet
from agentrl.tools.schema import Surface, canonical_schema

__all__ = ["Observation", "Surface", "ToolError", "ToolSet", "canonical_schema"]
