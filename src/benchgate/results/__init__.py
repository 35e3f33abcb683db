"""The data that passes between stages: a run's result bundle (env.json, metrics-ws<N>.json, eval.json),
the comparison (compare.json), the figures derived from them, and the claimed output directory. No stage
lives here; every stage reads and writes these.
"""
