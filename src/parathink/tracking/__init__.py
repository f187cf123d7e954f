"""Tracking interface (MLflow underneath) and the model registry."""
