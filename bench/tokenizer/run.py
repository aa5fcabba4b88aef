#!/usr/bin/env python3
"""Byte-level against a SentencePiece vocabulary at equal bytes of text, in bits per byte.

Trains a SentencePiece model on the corpus (`archipelago tokenizer train`), then two runs of the
default configuration (model.preset small, decoupled, M = 4) that stop after the same bytes of
training text: the byte-level run after BYTES tokens, the SentencePiece run after BYTES ÷ (the
corpus's bytes per token) tokens. Each summary's held-out bits per byte is measured by the run's own
evaluator on the held-out text; `archipelago eval` then scores each final version on text it never
trained on: the corpus's last 20 verses (held out) and the GPL-3 licence (English of another kind).
One JSON line per run, and one for the tokenizer, goes to --out.

    python3 bench/tokenizer/run.py [--bytes 2400000] [--vocab 8192] [--binary build/apps/archipelago]
                                   [--out bench/tokenizer/results/tokenizer-DATE.jsonl]
"""
import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile


def cpu_model():
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown"


def last_json(text):
    return json.loads(text.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bytes", type=int, default=2_400_000)
    parser.add_argument("--vocab", type=int, default=8192)
    parser.add_argument("--binary", default="build/apps/archipelago")
    parser.add_argument("--out", default=f"bench/tokenizer/results/tokenizer-{datetime.date.today()}.jsonl")
    args = parser.parse_args()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    scratch = tempfile.mkdtemp(prefix="archipelago-tokenizer-bench-")
    model = os.path.join(scratch, f"kjv-{args.vocab}.model")
    common = {"commit": commit, "cpu": cpu_model(), "command": " ".join(sys.argv)}
    rows = []
    tail = os.path.join(scratch, "last-20-verses.txt")
    with open("archipelago-runs/data/kjv.txt", "rb") as kjv, open(tail, "wb") as out:
        out.write(b"".join(kjv.read().splitlines(keepends=True)[-20:]))

    trained = subprocess.run([args.binary, "tokenizer", "train", "--json", "--corpus", "kjv", "--vocab", str(args.vocab),
                              "--out", model], capture_output=True, text=True, check=True)
    tokenizer = last_json(trained.stdout)
    rows.append({"kind": "tokenizer", **common, **{k: tokenizer[k] for k in
                 ("type", "vocab", "hash", "bytes", "tokens", "bytes_per_token", "round_trip", "train_s", "model_bytes")}})
    print(f"tokenizer: {tokenizer['vocab']} pieces, {tokenizer['bytes_per_token']:.3f} bytes per token", flush=True)

    for name, overrides, tokens in (
            ("bytes", ["--set", "data.tokenizer=bytes"], args.bytes),
            (f"spm-{args.vocab}", ["--set", f"data.tokenizer='spm:{model}'"], round(args.bytes / tokenizer["bytes_per_token"]))):
        run_dir = os.path.join(scratch, name)
        command = [args.binary, "train", "--json", "--no-sample", "--run-dir", run_dir, "--set", "train.max_seconds=0",
                   "--set", f"train.max_tokens={tokens}", *overrides]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"{name}: exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
        s = last_json(done.stdout)
        t = s["tokenizer"]
        row = {"kind": "run", "name": name, **common, "tokenizer": t["kind"], "vocab": t["vocab"],
               "corpus_bytes_per_token": t["corpus_bytes_per_token"], "heldout_bytes_per_token": t["heldout_bytes_per_token"],
               "max_tokens": tokens, "text_bytes": round(s["tokens"] * t["corpus_bytes_per_token"]),
               "parameters": s["parameters"], "steps": s["steps"], "tokens": s["tokens"], "wall_s": s["wall_s"],
               "heldout_loss": s["heldout_loss"], "heldout_bits_per_byte": s["heldout_bits_per_byte"],
               "initial_heldout_bits_per_byte": s["initial_heldout_bits_per_byte"],
               "bytes_sent": s["bytes_sent"], "precision": s["precision"], "mode": s["mode"], "learners": s["learners"]}
        for text_name, text in (("last 20 verses", tail), ("GPL-3", "/usr/share/common-licenses/GPL-3")):
            scored = subprocess.run([args.binary, "eval", "--json", "--run-dir", run_dir, "--text", text],
                                    capture_output=True, text=True, check=True)
            row.setdefault("eval", {})[text_name] = {k: v for k, v in last_json(scored.stdout).items()
                                                     if k in ("bytes", "tokens", "loss", "bits_per_byte")}
        rows.append(row)
        print(f"{name}: {row['tokens']} tokens ({row['text_bytes']} bytes of text), {row['steps']} steps, "
              f"{row['wall_s']:.0f} s, held-out {row['heldout_bits_per_byte']:.3f} bits per byte", flush=True)

    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w") as out:
        for row in rows:
            out.write(json.dumps(row) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
