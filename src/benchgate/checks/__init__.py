"""The compare stage: each figure of a run checked against its profile's stored baseline (throughput by
the screen, scaling efficiency, memory, loss, eval), the tables that show the verdict, and what to do
next about an undecided one. (Not called compare/: `benchgate.compare` is the public function.)
"""
