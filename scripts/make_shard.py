"""Generate benchgate's bundled eval shard and probes from a fixed seed.

The text is synthetic: sentences from a tiny grammar over invented words, so nothing is copied from
elsewhere and the shard is reproducible byte for byte. Three regularities give the probes something to
measure after a short training run:
  facts  'the colour of <name> is <colour>.'   recall of facts repeated through the shard
  count  'count six seven eight nine.'         continuing a sequence
  echo   'say <word> <word>.'                  copying a word never seen in training (in-context)

Run `python scripts/make_shard.py` to rewrite src/benchgate/data/{shard.txt,probes.json};
a test checks that the committed files equal what this script produces.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

SEED = 20261121
LINES = 4000
HELDOUT_FRACTION = 0.1
OUT = Path(__file__).resolve().parent.parent / "src" / "benchgate" / "data"

COLOURS = ["red", "blue", "green", "gold", "grey", "pink", "black", "white"]
PLACES = ["the hills", "the port", "the city", "the marsh", "the woods", "the coast"]
NUMBERS = [
    "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
    "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen", "twenty",
]  # fmt: skip
SYLLABLES = ["ka", "lo", "mi", "ru", "te", "zo", "ven", "dar", "pel", "quo", "sif", "nab"]


def _word(rng: random.Random, syllables: int) -> str:
    return "".join(rng.choice(SYLLABLES) for _ in range(syllables))


def generate() -> tuple[str, dict[str, list[dict[str, str]]]]:
    rng = random.Random(SEED)
    names = sorted({_word(rng, 2) for _ in range(40)})[:16]
    colour_of = {n: rng.choice(COLOURS) for n in names}
    home_of = {n: rng.choice(PLACES) for n in names}
    trained_words = {_word(rng, 3) for _ in range(200)}
    novel_words = sorted({_word(rng, 3) for _ in range(400)} - trained_words)[:16]

    lines = []
    for _ in range(LINES):
        kind = rng.random()
        name = rng.choice(names)
        if kind < 0.3:
            lines.append(f"the colour of {name} is {colour_of[name]}.")
        elif kind < 0.45:
            lines.append(f"{name} lives in {home_of[name]}.")
        elif kind < 0.65:
            start = rng.randrange(len(NUMBERS) - 4)
            lines.append("count " + " ".join(NUMBERS[start : start + 4]) + ".")
        elif kind < 0.85:
            word = rng.choice(sorted(trained_words))
            lines.append(f"say {word} {word}.")
        else:
            lines.append(f"{name} sees {rng.choice(names)} near {rng.choice(PLACES)}.")
    text = "\n".join(lines) + "\n"

    probes = {
        "facts": [{"prompt": f"the colour of {n} is", "target": f" {colour_of[n]}."} for n in names],
        "count": [
            {"prompt": "count " + " ".join(NUMBERS[s : s + 3]), "target": f" {NUMBERS[s + 3]}."}
            for s in range(len(NUMBERS) - 4)
        ][:16],
        "echo": [{"prompt": f"say {w}", "target": f" {w}."} for w in novel_words],
    }
    return text, probes


def main() -> None:
    text, probes = generate()
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "shard.txt").write_text(text, encoding="ascii")
    meta = {"seed": SEED, "heldout_fraction": HELDOUT_FRACTION, "probes": probes}
    (OUT / "probes.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n", encoding="ascii")
    print(f"wrote {len(text)} bytes of shard and {sum(len(v) for v in probes.values())} probes to {OUT}")


if __name__ == "__main__":
    main()
