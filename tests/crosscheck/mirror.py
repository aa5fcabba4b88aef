#!/usr/bin/env python3
"""An independent PyTorch mirror of the training math, replaying an export of the reference engine.

Usage: mirror.py EXPORT_DIR   (written by crosscheck_export; its header describes the files)

From the exported θ0 and batches it recomputes, in float32 on one CPU thread:
  - the model: token + learned position embeddings, pre-norm blocks of causal self-attention with
    QK-LayerNorm (over the head dimension, shared by the heads) and a SwiGLU (or GELU) MLP, a final
    LayerNorm, logits through the tied token embedding;
  - the loss: cross-entropy + z_loss · mean(logsumexp(logits)²); the cross-entropy is what is reported;
  - the inner step: global-norm clipping, learning rate from linear warmup then cosine to
    min_lr_fraction of the peak, AdamW (decoupled weight decay on tensors of rank ≥ 2 only, bias
    corrected moments), every learner keeping its own AdamW state and schedule across rounds;
  - sync DiLoCo: each learner starts the round from θ, takes H steps, Δ_m = θ − θ_m; Δ is the
    token-weighted mean (w_m = tokens_m · tokens_m / steps_m); θ ← Nesterov(θ, Δ) with
    b ← μ·b + Δ, θ ← θ − lr·(Δ + μ·b) (torch.optim.SGD(nesterov=True), no dampening), μ of the
    r-th outer step warmed up as μ·min(1, r / W) when outer.momentum_warmup W > 0. The rule is
    elementwise, so the fragments the engine applies it by do not change the result;
  - ddp: one model; a step's M batches form one batch of M·B sequences (equal sizes: its mean loss
    is the mean of the per-batch losses), and one AdamW step per step.

It compares every step's loss, cross-entropy, gradient norm (before clipping) and learning rate,
then the global parameters after every round, against the engine's, and exits 1 naming the first
mismatch. Nothing but θ0 and the batches is taken from the export, so an error anywhere carries into
everything after it.
"""
import json
import math
import os
import sys

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
    from torch import nn
except ImportError as error:
    sys.exit(f"mirror: {error}; install python3-torch and python3-numpy (scripts/setup.sh)")

# Relative tolerance for losses, gradient norms and per-tensor parameter errors. Both sides run the
# same float32 operations but not in the same order (hand-written AdamW, clipping and outer step
# here; LibTorch's C++ optimizer and the engine's loops there), so they differ by float32 rounding
# (~1e-7 per operation), which AdamW amplifies where a gradient element is near ε: ddp's one
# batch of M·B rows here against M accumulated backward passes there gives such an element
# (|g| ≈ 1e-8, its sum nearly cancelling) a 0.6% different gradient, and its first AdamW step a
# ~1e-6 different size (2.7e-5 of its tensor). Measured: sync ≤ 4e-7, ddp ≤ 3e-5. Any real
# difference in the math (a wrong decay group, schedule, bias correction, clipping, z-loss, mask,
# merge weight or momentum form) moves a loss, a gradient norm or a tensor by more than 1e-4.
TOLERANCE = 1e-4
LR_TOLERANCE = 1e-12  # the schedule is computed in double on both sides

# The key LayerNorm's bias adds q·b to every score of a query's row, and softmax ignores a shift
# of its row: its exact gradient is zero and it changes neither the loss nor any other gradient.
# Its values on both sides are θ0 plus AdamW's amplification of rounding noise (|g| ~ 1e-11 ≪ ε
# moves it by ~lr·|g|/ε a step), different noise on each side, so the two are not compared with
# each other. Instead the mirror checks the identity at every step (its gradient ≤ 1e-6 · the
# global norm) and that on both sides the bias did not learn: it stays within 1e-3 of θ0, relative
# to its LayerNorm's weight (AdamW moves a parameter with a real gradient by about lr a step, 1e-3
# at the first step alone; the noise here moves it by ~5e-5 over the whole run).
SHIFT_INVARIANT_SUFFIX = ".attn.k_norm.bias"
SHIFT_INVARIANT_GRADIENT = 1e-6
SHIFT_INVARIANT_DRIFT = 1e-3


class Mismatch(Exception):
    pass


# ----------------------------------------------------------------------------------------------
# The model, in the order data flows.

class CausalSelfAttention(nn.Module):
    def __init__(self, d_model, heads):
        super().__init__()
        self.heads = heads
        head_dim = d_model // heads
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.proj = nn.Linear(d_model, d_model, bias=False)
        self.q_norm = nn.LayerNorm(head_dim)
        self.k_norm = nn.LayerNorm(head_dim)

    def forward(self, x):  # (B, T, C) -> (B, T, C)
        B, T, C = x.shape
        D = C // self.heads
        qkv = self.qkv(x).view(B, T, 3, self.heads, D)
        q = self.q_norm(qkv[:, :, 0]).transpose(1, 2)  # (B, H, T, D)
        k = self.k_norm(qkv[:, :, 1]).transpose(1, 2)  # (B, H, T, D)
        v = qkv[:, :, 2].transpose(1, 2)               # (B, H, T, D)
        scores = q @ k.transpose(-2, -1) / math.sqrt(D)  # (B, H, T, T)
        future = torch.ones(T, T, dtype=torch.bool).triu(1)  # position t sees positions ≤ t only
        attention = scores.masked_fill(future, float("-inf")).softmax(dim=-1)
        y = (attention @ v).transpose(1, 2).reshape(B, T, C)
        return self.proj(y)


class Mlp(nn.Module):
    def __init__(self, d_model, kind):
        super().__init__()
        self.swiglu = kind == "swiglu"
        hidden = ((8 * d_model) // 3 + 31) // 32 * 32 if self.swiglu else 4 * d_model
        self.up = nn.Linear(d_model, hidden, bias=False)
        if self.swiglu:
            self.gate = nn.Linear(d_model, hidden, bias=False)
        self.down = nn.Linear(hidden, d_model, bias=False)

    def forward(self, x):
        if self.swiglu:
            return self.down(F.silu(self.gate(x)) * self.up(x))
        return self.down(F.gelu(self.up(x)))


class Block(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.attn_norm = nn.LayerNorm(model["d_model"])
        self.attn = CausalSelfAttention(model["d_model"], model["heads"])
        self.mlp_norm = nn.LayerNorm(model["d_model"])
        self.mlp = Mlp(model["d_model"], model["mlp"])

    def forward(self, x):
        x = x + self.attn(self.attn_norm(x))
        return x + self.mlp(self.mlp_norm(x))


class Transformer(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.token_embedding = nn.Embedding(model["vocab"], model["d_model"])
        self.position_embedding = nn.Embedding(model["seq_len"], model["d_model"])
        self.blocks = nn.ModuleList(Block(model) for _ in range(model["layers"]))
        self.final_norm = nn.LayerNorm(model["d_model"])

    def forward(self, tokens):  # (B, T) int64 -> logits (B, T, V)
        T = tokens.shape[1]
        x = self.token_embedding(tokens) + self.position_embedding(torch.arange(T))
        for block in self.blocks:
            x = block(x)
        return self.final_norm(x) @ self.token_embedding.weight.t()  # tied weights


def language_model_loss(logits, targets, z_loss):
    """(cross-entropy + z_loss · mean(log Z²), cross-entropy), means over all B·T positions."""
    flat = logits.reshape(-1, logits.shape[-1])
    cross_entropy = F.cross_entropy(flat, targets.reshape(-1))
    return cross_entropy + z_loss * torch.logsumexp(flat, dim=-1).pow(2).mean(), cross_entropy


# ----------------------------------------------------------------------------------------------
# The inner optimizer.

def scheduled_learning_rate(inner, step):
    """Linear warmup over warmup_steps (step 0 gets lr/warmup), then cosine to min_lr_fraction·lr
    at total_steps; a schedule no longer than its warmup stays at the peak."""
    lr, warmup, total = inner["lr"], inner["warmup_steps"], inner["total_steps"]
    if warmup > 0 and step < warmup:
        return lr * (step + 1) / warmup
    if total <= warmup:
        return lr
    progress = min(1.0, max(0.0, (step - warmup) / (total - warmup)))
    floor = inner["min_lr_fraction"]
    return lr * (floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * progress)))


class AdamW:
    """Loshchilov & Hutter's decoupled weight decay, in PyTorch's parameterisation:
    θ ← θ·(1 − lr·λ) for decayed tensors; m ← β1·m + (1−β1)·g; v ← β2·v + (1−β2)·g²;
    θ ← θ − (lr / (1 − β1^t)) · m / (√v / √(1 − β2^t) + ε)."""

    def __init__(self, model, inner):
        self.inner = inner
        self.t = 0
        self.parameters = [(p, p.dim() >= 2) for p in model.parameters()]  # decay on matrices only
        self.moments = [(torch.zeros_like(p), torch.zeros_like(p)) for p, _ in self.parameters]

    @torch.no_grad()
    def step(self, lr):
        beta1, beta2, eps, decay = (self.inner[k] for k in ("beta1", "beta2", "eps", "weight_decay"))
        self.t += 1
        correction1 = 1 - beta1 ** self.t
        correction2 = 1 - beta2 ** self.t
        for (p, decayed), (m, v) in zip(self.parameters, self.moments):
            if decayed:
                p.mul_(1 - lr * decay)
            m.mul_(beta1).add_(p.grad, alpha=1 - beta1)
            v.mul_(beta2).addcmul_(p.grad, p.grad, value=1 - beta2)
            p.addcdiv_(m, v.sqrt() / math.sqrt(correction2) + eps, value=-lr / correction1)


class Learner:
    """One model with its own AdamW state and position in the learning-rate schedule."""

    def __init__(self, setup):
        self.setup = setup
        self.model = Transformer(setup["model"])
        self.optimizer = AdamW(self.model, setup["inner"])
        self.steps = 0

    def step(self, tokens):
        """One inner step on (rows, T+1) tokens; returns what the engine reports for it."""
        inner = self.setup["inner"]
        tokens = tokens.long()
        for p in self.model.parameters():
            p.grad = None
        logits = self.model(tokens[:, :-1])
        loss, cross_entropy = language_model_loss(logits, tokens[:, 1:], self.setup["model"]["z_loss"])
        loss.backward()
        with torch.no_grad():
            grads = [p.grad for p in self.model.parameters()]
            grad_norm = math.sqrt(sum(float(g.double().pow(2).sum()) for g in grads))
            for name, p in self.model.named_parameters():
                if name.endswith(SHIFT_INVARIANT_SUFFIX):
                    largest = p.grad.abs().max().item()
                    if not largest <= SHIFT_INVARIANT_GRADIENT * grad_norm:
                        raise Mismatch(f"{name} has gradient {largest:.3e} (global norm {grad_norm:.3e}): the "
                                       "model is no longer shift-invariant in it; compare it like any tensor")
            scale = inner["clip_norm"] / (grad_norm + 1e-6)  # 1e-6 as in torch's clip_grad_norm_
            clipped = scale < 1
            if clipped:
                for g in grads:
                    g.mul_(scale)
        lr = scheduled_learning_rate(inner, self.steps)
        self.optimizer.step(lr)
        self.steps += 1
        return {"loss": float(loss), "cross_entropy": float(cross_entropy), "grad_norm": grad_norm, "lr": lr,
                "tokens": tokens.shape[0] * (tokens.shape[1] - 1), "clipped": clipped}


# ----------------------------------------------------------------------------------------------
# Parameters as one flat vector in the engine's layout.

def check_layout(model, layout, count):
    ours = [(name, list(p.shape)) for name, p in model.named_parameters()]
    theirs = {p["name"]: p["shape"] for p in layout}
    if sorted(ours) != sorted(theirs.items()):
        missing = sorted(set(theirs) - {n for n, _ in ours})
        extra = sorted({n for n, _ in ours} - set(theirs))
        shapes = [(n, s, theirs[n]) for n, s in ours if n in theirs and theirs[n] != s]
        raise Mismatch(f"parameter layout: engine-only {missing}, mirror-only {extra}, shape (mirror, engine) {shapes}")
    offset = 0
    for p in layout:
        if p["offset"] != offset or p["numel"] != math.prod(p["shape"]):
            raise Mismatch(f"parameter layout: {p['name']} at offset {p['offset']}, numel {p['numel']} is not packed")
        offset += p["numel"]
    if offset != count:
        raise Mismatch(f"parameter layout covers {offset} values, the export has {count}")


def unflatten(flat, layout):
    return {p["name"]: flat[p["offset"]:p["offset"] + p["numel"]].reshape(p["shape"]) for p in layout}


@torch.no_grad()
def load(model, tensors):
    for name, p in model.named_parameters():
        p.copy_(tensors[name])


def snapshot(model):
    return {name: p.detach().clone() for name, p in model.named_parameters()}


# ----------------------------------------------------------------------------------------------
# The comparison.

def relative_error(mirror, engine):
    return abs(mirror - engine) / max(abs(engine), 1e-30)


def compare_step(index, record, ours, where):
    if record["tokens"] != ours["tokens"]:
        raise Mismatch(f"step {index} ({where}): the engine counted {record['tokens']} tokens, the mirror {ours['tokens']}")
    for key, tolerance in (("loss", TOLERANCE), ("cross_entropy", TOLERANCE), ("grad_norm", TOLERANCE),
                           ("lr", LR_TOLERANCE)):
        error = relative_error(ours[key], record[key])
        if not error <= tolerance:
            raise Mismatch(f"step {index} ({where}): {key} engine {record[key]!r}, mirror {ours[key]!r}, "
                           f"relative error {error:.3e} > {tolerance:g}")
    return max(relative_error(ours[k], record[k]) for k in ("loss", "cross_entropy", "grad_norm"))


def compare_round(round_index, ours, engine, theta0, layout):
    """Per tensor: max |mirror − engine| / max |engine|; a shift-invariant bias: its drift from θ0
    on each side / max |its weight|. Returns the largest relative error over the other tensors."""
    worst = 0.0
    for p in layout:
        name = p["name"]
        reference = engine[name]
        if name.endswith(SHIFT_INVARIANT_SUFFIX):
            scale = max(engine[name[:-len("bias")] + "weight"].abs().max().item(), 1e-30)
            for side, values in (("engine", reference), ("mirror", ours[name])):
                drift = (values - theta0[name]).abs().max().item() / scale
                if not drift <= SHIFT_INVARIANT_DRIFT:
                    raise Mismatch(f"round {round_index}: tensor {name} ({side}) moved {drift:.3e} from θ0, "
                                   f"relative to its weight; its gradient is zero, so > {SHIFT_INVARIANT_DRIFT:g} "
                                   "means it learned")
            continue
        diff = (ours[name] - reference).abs().max().item()
        error = diff / max(reference.abs().max().item(), 1e-30)
        if not error <= TOLERANCE:
            raise Mismatch(f"round {round_index}: tensor {name} max |diff| {diff:.3e}, "
                           f"max relative error {error:.3e} > {TOLERANCE:g}")
        worst = max(worst, error)
    return worst


def merge_weight(rule, tokens, steps):
    if rule == "mean":
        return 1.0
    if rule == "token_weighted":
        return tokens * (tokens / steps)  # quantity × quality
    raise Mismatch(f"outer.merge = {rule!r}: the mirror implements mean and token_weighted")


class Replay:
    """The export, and the mirror's own run of its schedule checked against it step by step."""

    def __init__(self, directory):
        with open(os.path.join(directory, "export.json")) as f:
            self.export = json.load(f)
        if self.export.get("format") != 1:
            raise Mismatch(f"export format {self.export.get('format')!r}, this mirror reads format 1")
        self.setup = self.export["setup"]
        self.layout = self.export["parameters"]
        count = self.export["parameter_count"]
        rows, T = self.setup["inner"]["batch_size"], self.setup["model"]["seq_len"] + 1

        def read(name, dtype, shape):
            data = np.fromfile(os.path.join(directory, name), dtype=dtype)
            if data.size != math.prod(shape):
                raise Mismatch(f"{name} holds {data.size} values, the manifest announces {math.prod(shape)}")
            return torch.from_numpy(data.reshape(shape))

        self.theta0 = unflatten(read("theta0.f32", "<f4", (count,)), self.layout)
        rounds = read("rounds.f32", "<f4", (self.export["rounds"], count))
        self.rounds = [unflatten(r, self.layout) for r in rounds]
        self.batches = read("batches.u8", "u1", (self.export["batch_records"], rows, T))
        self.steps = iter(enumerate(self.export["steps"]))
        self.worst_step = 0.0
        self.clipped_steps = 0

    def check_step(self, index, record, ours, where):
        self.worst_step = max(self.worst_step, compare_step(index, record, ours, where))
        self.clipped_steps += ours["clipped"]

    def next_step(self, learner, round_index):
        """The engine's next step record; it must be the one this mirror's loop takes now."""
        try:
            index, record = next(self.steps)
        except StopIteration:
            raise Mismatch(f"the engine recorded fewer steps than round {round_index}, learner {learner} takes")
        if record["learner"] != learner or record["round"] != round_index:
            raise Mismatch(f"step {index}: the engine stepped learner {record['learner']} in round "
                           f"{record['round']}, the mirror learner {learner} in round {round_index}")
        return index, record, torch.cat([self.batches[b] for b in record["batches"]])

    def run(self):
        run = self.setup["run"]
        mode, M, H = run["mode"], run["learners"], run["inner_steps"]
        learners = [Learner(self.setup) for _ in range(1 if mode == "ddp" else M)]
        check_layout(learners[0].model, self.layout, self.export["parameter_count"])
        theta = {name: t.clone() for name, t in self.theta0.items()}
        for learner in learners:
            load(learner.model, theta)
        outer = self.setup["outer"]
        momentum = {name: torch.zeros_like(t) for name, t in theta.items()}
        worst_round = []
        for r in range(1, self.export["rounds"] + 1):
            if mode == "ddp":
                for h in range(H):
                    index, record, tokens = self.next_step(0, r)
                    if tokens.shape[0] != M * self.setup["inner"]["batch_size"]:
                        raise Mismatch(f"step {index}: a ddp step consumed {tokens.shape[0]} sequences, expected M·B")
                    ours = learners[0].step(tokens)
                    self.check_step(index, record, ours, f"round {r}, step {h}")
                theta = snapshot(learners[0].model)
            else:
                deltas, weights = [], []
                for m, learner in enumerate(learners):
                    load(learner.model, theta)
                    tokens_seen = 0
                    for h in range(H):
                        index, record, tokens = self.next_step(m, r)
                        ours = learner.step(tokens)
                        self.check_step(index, record, ours, f"round {r}, learner {m}, inner step {h}")
                        tokens_seen += ours["tokens"]
                    local = snapshot(learner.model)
                    deltas.append({name: theta[name] - local[name] for name in theta})  # Δ_m = θ − θ_m
                    weights.append(merge_weight(outer["merge"], tokens_seen, H))
                total = sum(weights)
                # Outer-momentum warm-up: round r (the r-th outer step) uses mu * min(1, r / W).
                warmup = outer.get("momentum_warmup", 0)
                mu = outer["momentum"] * (min(1.0, r / warmup) if warmup > 0 else 1.0)
                with torch.no_grad():
                    for name in theta:
                        delta = sum(w / total * d[name] for w, d in zip(weights, deltas))
                        momentum[name] = mu * momentum[name] + delta
                        theta[name] = theta[name] - outer["lr"] * (delta + mu * momentum[name])
            worst_round.append(compare_round(r, theta, self.rounds[r - 1], self.theta0, self.layout))
        leftover = sum(1 for _ in self.steps)
        if leftover:
            raise Mismatch(f"the engine recorded {leftover} steps more than the mirror took")
        steps = len(self.export["steps"])
        if not 0 < self.clipped_steps < steps:
            raise Mismatch(f"{self.clipped_steps} of {steps} steps were clipped: the export must exercise both "
                           "clipped and unclipped steps (adjust inner.clip_norm in crosscheck_export)")
        return worst_round


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: mirror.py EXPORT_DIR")
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    torch.set_default_dtype(torch.float32)
    try:
        replay = Replay(sys.argv[1])
        worst_round = replay.run()
    except Mismatch as mismatch:
        print(f"mirror: FAILED: {mismatch}", file=sys.stderr)
        return 1
    run = replay.setup["run"]
    print(f"mirror: {run['mode']} M={run['learners']} H={run['inner_steps']}: {len(replay.export['steps'])} steps "
          f"and {len(worst_round)} rounds agree with the engine ({replay.clipped_steps} steps clipped); max relative error: steps "
          f"{replay.worst_step:.2e}, round parameters " + ", ".join(f"{e:.2e}" for e in worst_round) +
          f" (tolerance {TOLERANCE:g})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
