"""Package data: the bundled trace samples and the embedded default configs."""
