"""Why it is slower: profiled A/B rounds' traces read as per-operator change, with intervals."""
