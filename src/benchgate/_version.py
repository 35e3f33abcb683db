"""The version of benchgate, on its own so that any module reads it without importing the package face."""

__version__ = "0.1.0"
