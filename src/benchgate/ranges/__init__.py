"""Commit ranges: gating each commit of a range (backfill) and finding the first slower one (bisect)."""
