"""Training: model kinds, time-split evaluation, calibration, ONNX export, MLflow tracking.

Entry points: ``python training/train.py --config configs/train/<kind>.yaml`` (= ``kvcast
train``) and ``kvcast score``; the run itself is :func:`kvcast.training.pipeline.run_training`.
"""
