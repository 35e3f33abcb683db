"""What the CRDs refuse at the API server, before the controller sees an object: the patterns of the
spec's commits, repositories and branches, and the bounds of its free strings, lists and maps (the
models in `resources` carry them into the generated CRDs, and check them again themselves)."""

from __future__ import annotations

SHA_PATTERN = r"^([0-9a-f]{40}|[0-9a-f]{64})$"
SHA_OR_EMPTY_PATTERN = r"^([0-9a-f]{40}|[0-9a-f]{64})?$"
# The CRD refuses, at the API server, what benchgate.measure.source would refuse later. Its patterns are
# JSON-schema regexes that Go (the API server), ECMA-262 and pydantic all read alike: no lookaround, so
# they say what a value is made of, not what it must avoid. The controller still runs the full checks
# (source.validate_repository, validate_branch, credentials) before any KFP run exists.
#
# Repository: source's URL grammar itself. Host and user never start with '-' (ssh would read
# "-oProxyCommand=..." as an option); a user starts with a letter, digit or '_'.
_HOST = r"[A-Za-z0-9][A-Za-z0-9.-]*"
_USER = r"[A-Za-z0-9_][A-Za-z0-9._~%+=-]*"
_PORT = r"(:[0-9]{1,5})?"
_PATH = r"[A-Za-z0-9._~:/@%+=-]"
REPOSITORY_PATTERN = (
    rf"^(https://({_USER}(:[A-Za-z0-9._~%+=-]*)?@)?{_HOST}{_PORT}(/{_PATH}*)?"
    rf"|ssh://({_USER}@)?{_HOST}{_PORT}(/{_PATH}*)?"
    rf"|git@{_HOST}:[A-Za-z0-9._~/@%+=]{_PATH}*"
    rf"|file://({_HOST})?/{_PATH}*)$"
)
# Branch (or empty: none): runs of [A-Za-z0-9_-] joined by '.', '/' or './', the first not starting with
# '-', at most MAX_BRANCH_LENGTH long (the schema's maxLength). Joined that way, a name has no '//', no
# '..', no component starting with '.', and no leading or trailing '/' or '.': every rule of
# source.validate_branch but two, which need a lookahead and stay the controller's: not 'HEAD', and no
# component ending in '.lock'.
BRANCH_PATTERN = r"^([A-Za-z0-9_][A-Za-z0-9_-]*((\.|/|\./)[A-Za-z0-9_-]+)*)?$"
# Bounds on every free string, map and list of the specs, in the CRDs too: the API server refuses an
# oversized object before it is stored, and its CEL cost estimates need them. Generous for real use.
MAX_NAME = 253  # a Kubernetes name (a PVC, a resource, a runtime), a time zone, a cron expression
MAX_KEY = 317  # a label or taint key: a DNS-1123 prefix (253), '/', a name (63)
MAX_URL = 2048
MAX_TEXT = 1024  # free text: a workload reference, an experiment, a value
MAX_ITEMS = 64  # a list or map: tolerations, node selector, labels, workload arguments
