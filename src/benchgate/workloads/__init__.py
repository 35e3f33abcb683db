"""What is benchmarked: the workload protocol users implement (`base`), the reference GPT (`gpt`), the
bundled eval shard, FLOPs per token and peak FLOP/s, and the training step that bench, eval and trace
all run.
"""
