"""The embedded default, end to end on the CPU with no network.

Builds config B1_glaive from the bundled sample prompts with the bundled tiny model, writes a
Hub-layout folder (demo_out/), loads it back with `datasets.load_dataset(folder, "B1_glaive")` and
prints one decoded sample with its boundaries marked. Then builds B2_hermes_fc, whose default is
`--turns all`, and shows one on-policy conversation turn by turn: the target calls a tool, the
source's result for that function is appended, and the target writes the turns after it.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

ROOT = Path(__file__).resolve().parent.parent
MODEL = ROOT / "tests" / "fixtures" / "models" / "tiny-kimi"
OUT = Path(os.environ.get("DEMO_OUT", ROOT / "demo_out"))


def main() -> int:
    from datasets import load_dataset
    from transformers import AutoTokenizer

    from eagle3_synth.cli import main as cli
    from eagle3_synth.view import render_conversation, render_row

    argv = ["build", "B1_glaive", "--model", str(MODEL), "--out", str(OUT),
            "--max-new-tokens", "256", "--temperature", "0.8", "--seed", "0"]
    print("$ eagle3-synth " + " ".join(argv), flush=True)
    if cli(argv) != 0:
        return 1
    # A plain load sees a rebuilt folder's rows: its README's data_files name this build's shards.
    dataset = load_dataset(str(OUT), "B1_glaive", split="train")
    print(f"\nload_dataset({str(OUT)!r}, 'B1_glaive') -> {len(dataset)} rows, features:")
    for name, feature in dataset.features.items():
        print(f"  {name}: {feature}")
    # Show a sample that has a tool call if there is one: it has every kind of boundary.
    index = next((i for i, calls in enumerate(dataset["tool_calls"]) if calls), 0)
    tokenizer = AutoTokenizer.from_pretrained(MODEL)
    print("\n" + render_row(dataset[index], tokenizer, colour=sys.stdout.isatty()))

    argv = ["build", "B2_hermes_fc", "--model", str(MODEL), "--out", str(OUT), "--max-new-tokens", "256",
            "--temperature", "0"]
    print("\n$ eagle3-synth " + " ".join(argv), flush=True)
    if cli(argv) != 0:
        return 1
    rows = load_dataset(str(OUT), "B2_hermes_fc", split="train").to_list()
    # The conversation with the most turns: a tool loop, when the target called the source's function.
    longest = max({r["conversation_id"] for r in rows}, key=lambda c: sum(r["conversation_id"] == c for r in rows))
    turns = [r for r in rows if r["conversation_id"] == longest and r["sample_index"] == 0]
    print(f"\nconversation {longest}, turn by turn (eagle3-synth inspect {OUT} B2_hermes_fc --conversation {longest}):")
    print(render_conversation(turns, tokenizer, colour=sys.stdout.isatty()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
