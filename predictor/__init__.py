"""Predictor: the ONNX scorer and the cost-function decider (see the README roadmap)."""
