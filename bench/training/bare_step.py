#!/usr/bin/env python3
"""A bare PyTorch eager inner step of Archipelago's model: the yardstick of a learner's step.

Usage: bare_step.py --preset small --vocab 8192 --precision fp32|bf16 --threads 2 --steps 20

The model is tests/crosscheck/mirror.py's (the project's independent PyTorch mirror: learned
positions, pre-norm blocks with QK-LayerNorm, SwiGLU, tied embeddings), the step is
cross-entropy + z-loss 1e-4, global-norm clipping at 1.0 and torch.optim.AdamW, on batches of 16
sequences of the preset's length (token ids below 256, as the byte corpus gives; the logits cover
the whole vocabulary either way). bf16 runs the forward pass under torch.autocast, as the engine
does. Prints one JSON line: seconds per step and tokens per second, after 2 warm-up steps.
Run it under the same allocator as the engine (LD_PRELOAD) to compare like with like.
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "crosscheck"))
import torch  # noqa: E402
import math  # noqa: E402

import mirror  # noqa: E402
from mirror import Transformer, language_model_loss  # noqa: E402


def attention_with_fp32_norms(self, x):  # (B, T, C) -> (B, T, C)
    """mirror.CausalSelfAttention.forward with QK-LayerNorm in fp32, as the engine runs it
    (training/model.cpp): under bf16 autocast LibTorch 1.13's CPU layer_norm refuses bf16 input
    with fp32 weights. In fp32 the casts do nothing."""
    B, T, C = x.shape
    D = C // self.heads
    qkv = self.qkv(x).view(B, T, 3, self.heads, D)
    q = self.q_norm(qkv[:, :, 0].float()).transpose(1, 2)
    k = self.k_norm(qkv[:, :, 1].float()).transpose(1, 2)
    v = qkv[:, :, 2].transpose(1, 2)
    scores = q @ k.transpose(-2, -1) / math.sqrt(D)
    future = torch.ones(T, T, dtype=torch.bool).triu(1)
    attention = scores.masked_fill(future, float("-inf")).softmax(dim=-1)
    y = (attention @ v.to(attention.dtype)).transpose(1, 2).reshape(B, T, C)
    return self.proj(y)


mirror.CausalSelfAttention.forward = attention_with_fp32_norms

PRESETS = {"tiny": (64, 2, 2, 64), "small": (256, 4, 4, 128), "base": (512, 8, 8, 256)}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--preset", default="small", choices=sorted(PRESETS))
    parser.add_argument("--vocab", type=int, default=8192)
    parser.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=16)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    d_model, layers, heads, seq_len = PRESETS[args.preset]
    model = Transformer({"vocab": args.vocab, "d_model": d_model, "layers": layers, "heads": heads,
                         "seq_len": seq_len, "mlp": "swiglu"})
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
    batches = [torch.randint(0, 256, (args.batch, seq_len + 1)) for _ in range(args.steps + 2)]

    def step(batch):
        inputs, targets = batch[:, :-1], batch[:, 1:]
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.precision == "bf16"):
            logits = model(inputs)
        loss, _ = language_model_loss(logits.float(), targets, 1e-4)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()

    for batch in batches[:2]:
        step(batch)
    start = time.perf_counter()
    for batch in batches[2:]:
        step(batch)
    seconds = (time.perf_counter() - start) / args.steps
    print(json.dumps({"preset": args.preset, "vocab": args.vocab, "precision": args.precision,
                      "threads": args.threads, "steps": args.steps, "seconds_per_step": seconds,
                      "tokens_per_s": args.batch * seq_len / seconds}))


if __name__ == "__main__":
    main()
