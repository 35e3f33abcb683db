"""The measuring stages: env (machine profile, git, fingerprints), bench (`launch` starts torchrun with
the `bench` worker on every rank), eval and trace, and the source checkout they run from. torch is
imported here and in workloads/ only.
"""
