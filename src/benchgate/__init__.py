"""benchgate: a benchmark operator and CI regression gate for PyTorch training."""

__version__ = "0.1.0"
