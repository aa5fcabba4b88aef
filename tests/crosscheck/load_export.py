#!/usr/bin/env python3
"""Opens an `archipelago export` directory with plain PyTorch and checks it against the C++ model.

Usage: load_export.py FP32_EXPORT BF16_EXPORT REFERENCE_DIR

Nothing of Archipelago is used but the model definition of the crosscheck mirror (mirror.py, a
PyTorch module written from the architecture's description, not from the C++ code). Every file is
read as another tool would read it:
  - model.safetensors by its published layout: an 8-byte little-endian header length, a JSON
    header (dtype, shape, data_offsets per tensor, optional __metadata__), then the raw
    little-endian tensors; F32 and BF16;
  - config.json for the dimensions, tokenizer.json for the tokenizer.
Checks, each exiting 1 with the reason:
  - the tensors are exactly the mirror's parameters (names and shapes), back to back, in bounds;
  - the fp32 export's logits on REFERENCE_DIR/tokens.u8 equal the C++ model's (logits.f32, written
    by export_logits from the run's store) to 1e-4;
  - the bf16 export holds, bit for bit, each fp32 tensor rounded by torch's `.to(torch.bfloat16)`,
    and its logits stay within BF16_LOGIT_TOLERANCE of the fp32 ones (relative to the largest);
  - each export's model.pt (--torch-save) opens with torch.load as a state dict holding the same
    tensors, names in the same order, dtypes and bits, as its model.safetensors.
"""
import json
import math
import os
import struct
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mirror import Transformer  # noqa: E402  (the crosscheck's independent model)

LOGIT_TOLERANCE = 1e-4
# bf16 keeps 8 bits of mantissa: a weight moves by up to 2^-9 of itself. Measured on a trained tiny
# model: the logits moved by 1.0e-3 of the largest logit; 1e-2 leaves room and still fails on a
# wrong tensor, which moves them by tens of percent.
BF16_LOGIT_TOLERANCE = 1e-2


class Bad(Exception):
    pass


def read_safetensors(path):
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        raise Bad(f"{path}: shorter than its 8-byte header length")
    (length,) = struct.unpack("<Q", blob[:8])
    if 8 + length > len(blob):
        raise Bad(f"{path}: header of {length} bytes runs past the file")
    header = json.loads(blob[8:8 + length].decode("utf-8"))
    data = blob[8 + length:]
    tensors, dtypes, end = {}, set(), 0
    entries = sorted(((k, v) for k, v in header.items() if k != "__metadata__"), key=lambda kv: kv[1]["data_offsets"][0])
    for name, entry in entries:
        begin, stop = entry["data_offsets"]
        if begin != end or stop > len(data):
            raise Bad(f"{path}: {name} at bytes {begin}..{stop} is not packed after byte {end} or runs past {len(data)}")
        end = stop
        count = math.prod(entry["shape"])
        raw = data[begin:stop]
        if entry["dtype"] == "F32":
            if len(raw) != 4 * count:
                raise Bad(f"{path}: {name} has {len(raw)} bytes for {count} F32 values")
            values = torch.from_numpy(np.frombuffer(raw, dtype="<f4").copy())
        elif entry["dtype"] == "BF16":
            if len(raw) != 2 * count:
                raise Bad(f"{path}: {name} has {len(raw)} bytes for {count} BF16 values")
            bits = np.frombuffer(raw, dtype="<i2").copy()  # the 16 bits as they are; torch views them as bf16
            values = torch.from_numpy(bits).view(torch.bfloat16)
        else:
            raise Bad(f"{path}: {name} has dtype {entry['dtype']}")
        tensors[name] = values.reshape(entry["shape"])
        dtypes.add(entry["dtype"])
    if end != len(data):
        raise Bad(f"{path}: {len(data) - end} bytes after the last tensor")
    return tensors, dtypes, header.get("__metadata__", {})


def model_of(directory):
    with open(os.path.join(directory, "config.json")) as f:
        config = json.load(f)
    with open(os.path.join(directory, "tokenizer.json")) as f:
        tokenizer = json.load(f)
    if tokenizer.get("type") != "bytes" or tokenizer.get("vocab_size") != config["vocab_size"]:
        raise Bad(f"{directory}: tokenizer {tokenizer} does not fit vocab_size {config['vocab_size']}")
    model = Transformer({"vocab": config["vocab_size"], "d_model": config["d_model"], "heads": config["heads"],
                         "layers": config["layers"], "seq_len": config["seq_len"], "mlp": config["mlp"]})
    return model, config


@torch.no_grad()
def load_into(model, tensors, directory):
    ours = {name: list(p.shape) for name, p in model.named_parameters()}
    theirs = {name: list(t.shape) for name, t in tensors.items()}
    if ours != theirs:
        raise Bad(f"{directory}: tensors {sorted(set(theirs) ^ set(ours))} differ in name, "
                  f"{[(n, theirs[n], ours[n]) for n in ours if n in theirs and theirs[n] != ours[n]]} in shape")
    for name, p in model.named_parameters():
        p.copy_(tensors[name].to(torch.float32))


@torch.no_grad()
def logits_of(model, tokens):
    model.eval()
    return model(tokens)[0]


def main():
    if len(sys.argv) != 4:
        sys.exit("usage: load_export.py FP32_EXPORT BF16_EXPORT REFERENCE_DIR")
    fp32_dir, bf16_dir, reference = sys.argv[1:]
    torch.set_num_threads(1)
    try:
        model, config = model_of(fp32_dir)
        fp32, dtypes, metadata = read_safetensors(os.path.join(fp32_dir, "model.safetensors"))
        if dtypes != {"F32"} or config["torch_dtype"] != "float32":
            raise Bad(f"{fp32_dir}: dtypes {dtypes}, config says {config['torch_dtype']}")
        load_into(model, fp32, fp32_dir)
        with open(os.path.join(reference, "tokens.u8"), "rb") as f:
            tokens = torch.tensor(list(f.read()), dtype=torch.long).unsqueeze(0)
        expected = torch.from_numpy(np.fromfile(os.path.join(reference, "logits.f32"), dtype="<f4").copy())
        expected = expected.reshape(tokens.shape[1], config["vocab_size"])
        ours = logits_of(model, tokens)
        scale = expected.abs().max().item()
        error = (ours - expected).abs().max().item() / scale
        if not error <= LOGIT_TOLERANCE:
            raise Bad(f"fp32 export: logits differ from the C++ model's by {error:.2e} of the largest (tolerance {LOGIT_TOLERANCE:g})")

        bf16_model, bf16_config = model_of(bf16_dir)
        bf16, bf16_types, _ = read_safetensors(os.path.join(bf16_dir, "model.safetensors"))
        if bf16_types != {"BF16"} or bf16_config["torch_dtype"] != "bfloat16":
            raise Bad(f"{bf16_dir}: dtypes {bf16_types}, config says {bf16_config['torch_dtype']}")
        for name, t in fp32.items():
            rounded = t.to(torch.bfloat16)
            if not torch.equal(rounded.view(torch.int16), bf16[name].view(torch.int16)):
                raise Bad(f"bf16 export: {name} is not the fp32 export rounded to bf16")
        load_into(bf16_model, bf16, bf16_dir)
        bf16_error = (logits_of(bf16_model, tokens) - expected).abs().max().item() / scale
        if not bf16_error <= BF16_LOGIT_TOLERANCE:
            raise Bad(f"bf16 export: logits differ from fp32 by {bf16_error:.2e} of the largest (tolerance {BF16_LOGIT_TOLERANCE:g})")
        for directory, tensors, dtype in ((fp32_dir, fp32, torch.float32), (bf16_dir, bf16, torch.bfloat16)):
            state = torch.load(os.path.join(directory, "model.pt"))
            if list(state.keys()) != list(tensors.keys()):
                raise Bad(f"{directory}/model.pt: names {list(state.keys())[:3]}... differ from model.safetensors'")
            for name, t in tensors.items():
                if state[name].dtype != dtype or not torch.equal(state[name], t):
                    raise Bad(f"{directory}/model.pt: {name} is not model.safetensors' {name}")
    except (Bad, KeyError, ValueError, OSError) as bad:
        print(f"load_export: FAILED: {bad}", file=sys.stderr)
        return 1
    print(f"load_export: version {metadata.get('version')}: {len(fp32)} tensors, {sum(t.numel() for t in fp32.values())} "
          f"parameters; fp32 logits match the C++ model to {error:.2e} (tolerance {LOGIT_TOLERANCE:g}); bf16 is the "
          f"fp32 export rounded, its logits within {bf16_error:.2e} (tolerance {BF16_LOGIT_TOLERANCE:g}); model.pt "
          f"(torch.load) holds the same tensors in both")
    return 0


if __name__ == "__main__":
    sys.exit(main())
