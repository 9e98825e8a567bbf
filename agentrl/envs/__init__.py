"""Environments: task generators with tools, verifiers and oracles; built-ins and plugins."""
