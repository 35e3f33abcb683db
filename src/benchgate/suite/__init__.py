"""Suites: several workloads and variants gated in one run, and the trade-offs between them."""
