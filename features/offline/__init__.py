"""The vectorised path: a whole event stream -> the training table (features + labels)."""
