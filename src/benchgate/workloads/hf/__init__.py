"""Hugging Face models as workloads: built from a configuration, with random weights, in the family asked.

    benchgate run --workload benchgate.workloads.hf:make_workload \\
        --workload-arg model_type=gpt2 --workload-arg size=tiny
    benchgate run --workload benchgate.workloads.hf:make_workload \\
        --workload-arg task=masked-lm --workload-arg model_type=bert --workload-arg size=tiny

`task=` names the family (tasks.py: causal-lm, the default, masked-lm, seq2seq-lm,
sequence-classification, image-classification, audio-classification): any model type that transformers
has that family's Auto class for is built from its configuration class with the given keys
(`n_layer`, `hidden_size`, ... whatever that class has), a size preset (`size=tiny|small|base`,
sizes.py) or a local `config.json` (`config=PATH`, a file or a directory holding one). Weights are
never loaded and nothing is downloaded: the model is the Auto class's `from_config`, initialised from
benchgate's seed, and a config path must name a file on this machine.

The language families read the bundled shard's byte tokens, as the reference GPT does
(benchgate.workloads.gpt), so a causal LM's eval scores every model on the same bytes: the vocabulary
defaults to 256 and may be larger (only the first 256 logits are scored), never smaller. The image and
audio families read seeded synthetic pixels and clips.

This package is the only one that imports transformers (an import-linter contract): it is the optional
extra `benchgate[hf]`, and the rest of benchgate must work without it.
"""

from __future__ import annotations

from benchgate.errors import WorkloadError

try:
    import transformers  # noqa: F401  (the extra's presence, checked before its modules are imported)
except ImportError as e:  # the optional extra is not installed
    raise WorkloadError(
        f"benchgate.workloads.hf needs transformers ({e}); install it with: pip install 'benchgate[hf]'"
    ) from None

from benchgate.workloads.hf.spec import HFSpec, causal_lm_types, parse_spec, workload_name
from benchgate.workloads.hf.workload import HFWorkload, make_workload

__all__ = ["HFSpec", "HFWorkload", "causal_lm_types", "make_workload", "parse_spec", "workload_name"]
