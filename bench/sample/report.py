#!/usr/bin/env python3
"""Prints bench/sample's table (markdown) from the JSON lines bench_sample wrote; with --readme FILE
it replaces the part of FILE between the results markers instead.

    python3 bench/sample/report.py RESULTS.jsonl [--readme bench/sample/README.md]
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import report_section  # noqa: E402


def main(path):
    rows = [json.loads(line) for line in open(path) if line.strip()]
    print("| preset | parameters | context | tokens | KV cache s | full context s | speedup | tokens/s (cache) "
          "| same tokens within the context |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in rows:
        print(f"| {r['preset']} | {r['parameters'] / 1e6:.2f} M | {r['seq_len']} | {r['tokens']} "
              f"| {r['kv_cache_s']:.3f} | {r['full_context_s']:.3f} | {r['speedup']:.1f}× "
              f"| {r['kv_cache_tokens_per_s']:.0f} | {'yes' if r['same_tokens_within_context'] else 'no'} |")
    print()
    print(f"Medians of {rows[0]['repeats']} runs each, {rows[0]['threads']} compute thread(s).")


if __name__ == "__main__":
    report_section.run(main)
