"""Built-in task families (tool pools): one module per family."""
