#!/usr/bin/env python3
"""Prints the byte-level vs SentencePiece comparison (markdown) from the JSON lines bench/tokenizer/run.py
wrote; with --readme FILE [--section NAME] it replaces the part of FILE between that section's markers.

    python3 bench/tokenizer/report.py RESULTS.jsonl [--readme README.md --section tokenizer]
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import report_section  # noqa: E402


def main(path):
    rows = [json.loads(line) for line in open(path) if line.strip()]
    tokenizer = next(r for r in rows if r["kind"] == "tokenizer")
    runs = [r for r in rows if r["kind"] == "run"]
    print(f"`{runs[0]['command']}` at `{runs[0]['commit']}` on {runs[0]['cpu']} ({runs[0]['precision']}): "
          f"`small`, {runs[0]['mode']}, M = {runs[0]['learners']}, both runs stopped after the same bytes of training text. "
          f"The {tokenizer['vocab']}-piece {tokenizer['type'].upper()} model trained on the whole corpus in "
          f"{tokenizer['train_s']:.0f} s ({tokenizer['model_bytes'] / 1e3:.0f} kB) and restores every book exactly; "
          f"it cuts the corpus to {tokenizer['bytes_per_token']:.2f} bytes per token.")
    print()
    print("| tokenizer | vocabulary | parameters | training tokens | bytes of text | inner steps | wall s "
          "| held-out bytes/token | held-out loss (nats/token) | held-out bits per byte |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in runs:
        print(f"| {r['name']} | {r['vocab']} | {r['parameters'] / 1e6:.2f} M | {r['tokens']:,} | {r['text_bytes']:,} "
              f"| {r['steps']} | {r['wall_s']:.0f} | {r['heldout_bytes_per_token']:.3f} | {r['heldout_loss']:.4f} "
              f"| **{r['heldout_bits_per_byte']:.3f}** |")
    evals = [name for name in runs[0].get("eval", {})]
    if evals:
        print()
        print("`archipelago eval` of each final version, in bits per byte:")
        print()
        print("| tokenizer | " + " | ".join(evals) + " |")
        print("|---|" + "---:|" * len(evals))
        for r in runs:
            print(f"| {r['name']} | " + " | ".join(f"{r['eval'][e]['bits_per_byte']:.3f} ({r['eval'][e]['bytes']:,} bytes)"
                                                for e in evals) + " |")


if __name__ == "__main__":
    report_section.run(main)
