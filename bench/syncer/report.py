#!/usr/bin/env python3
"""Prints bench/syncer's table (markdown) from the JSON lines bench_syncer wrote; with --readme FILE
it replaces the part of FILE between the results markers instead.

    python3 bench/syncer/report.py RESULTS.jsonl [--readme bench/syncer/README.md [--section NAME]]
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import report_section  # noqa: E402


def main(path):
    rows = [json.loads(line) for line in open(path) if line.strip()]
    folds = all("fold_s" in r["rounds"][-1] for r in rows)
    sharded = any(r.get("shards", 1) != 1 for r in rows)
    print("| parameters | learners |" + (" shards |" if sharded else "") + " updates/s | merge s | limit s | merge ÷ limit |"
          + (" folds s | folds ÷ limit |" if folds else "")
          + " commit s | round s | syncer CPU s | peak RSS MiB | peak above start, fp32 copies |")
    print("|---:|---:|" + ("---:|" if sharded else "") + "---:|---:|---:|---:|" + ("---:|---:|" if folds else "") + "---:|---:|---:|---:|---:|")
    for r in rows:
        last = r["rounds"][-1]  # the first round pays for first-touch allocations
        fold = f" {last['fold_s']:.2f} | {last['fold_vs_limit']:.1f} |" if folds else ""
        shards = f" {r.get('shards', 1)} |" if sharded else ""
        print(f"| {r['params'] / 1e6:.0f} M | {r['learners']} |{shards} {last['updates_per_s']:.1f} | {last['merge_s']:.2f} "
              f"| {last['limit_s']:.2f} | {last['merge_vs_limit']:.1f} |{fold} {last['commit_s']:.2f} "
              f"| {last['merge_s'] + last['commit_s']:.2f} "
              f"| {last['syncer_cpu_s']:.2f} | {r['peak_rss_mib']} | {r['peak_above_before_fp32_copies']:.2f} |")
    print()
    print(f"memcpy: {rows[0]['memcpy_gb_per_s']:.2f} GB/s (this run); figures of each configuration's last round "
          f"of {len(rows[0]['rounds'])}.")
    sampled = [r for r in rows if "sampled_peak" in r]
    if sampled:
        # What the resident memory was made of at its highest 5 ms sample (absolute, in fp32 copies).
        print()
        print("| parameters | learners | resident at the sampled peak | malloc in use | malloc held free | file-backed "
              "| resident before the actors |")
        print("|---:|---:|---:|---:|---:|---:|---:|")
        for r in sampled:
            p = r["sampled_peak"]
            print(f"| {r['params'] / 1e6:.0f} M | {r['learners']} | {p['resident_fp32_copies']:.2f} "
                  f"| {p['malloc_used_fp32_copies']:.2f} | {p['malloc_free_fp32_copies']:.2f} "
                  f"| {p['file_backed_fp32_copies']:.2f} | {r['rss_before_fp32_copies']:.2f} |")
    # Extrapolation, linear in parameters, from the row with the most learners at the largest size.
    largest = max(r["params"] for r in rows)
    row = max((r for r in rows if r["params"] == largest and r.get("shards", 1) == 1), key=lambda r: r["learners"])
    last = row["rounds"][-1]
    round_s = last["merge_s"] + last["commit_s"]  # first update sent -> every fragment committed
    per_learner_1b = round_s / row["learners"] * (1e9 / largest)  # s of a round per learner at 1 B parameters
    period_s = 25.0
    print()
    print(f"Extrapolation, not a measurement (linear in parameters, from the {largest / 1e6:.0f} M, "
          f"{row['learners']}-learner row, whose round of merges and commits took {round_s:.1f} s): at 1 B "
          f"parameters each learner's updates of one period cost the syncer {per_learner_1b:.2f} s of a round, so "
          f"one syncer on this machine serves {period_s / per_learner_1b:.0f} learners per {period_s:.0f} s period.")


if __name__ == "__main__":
    report_section.run(main)
