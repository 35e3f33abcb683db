"""The timing decisions, pure (no torch, no I/O): the stored-baseline screen and the paired A/B test."""
