"""Prefect flows over the DVC pipeline."""
