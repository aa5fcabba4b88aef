// `archipelago export`: one committed version of a run as a directory that other tools open.
//
//   model.safetensors  the parameters under their module names (the safetensors layout: an 8-byte
//                      little-endian header length, a JSON header of dtype, shape and byte offsets
//                      per tensor, then the raw little-endian tensors), fp32 or bf16
//   config.json        the architecture: dimensions, block structure, norms, tied embeddings, the
//                      tokenizer, and where the weights came from (run, version, digest)
//   tokenizer.json     the tokenizer: byte-level (token = one byte of UTF-8 text)
//   model.pt           with --torch-save: the same tensors as a state dict that torch.load opens
//                      (LibTorch's pickle_save), for tools that read no safetensors
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace archipelago::apps {

struct ExportArguments {
  std::string run_dir;
  std::optional<uint64_t> version;  // none: the latest committed version
  std::string out;                  // the export directory (created; existing files are replaced)
  std::string dtype = "fp32";       // fp32 | bf16
  bool torch_save = false;          // also model.pt: the state dict as torch.save writes it
  bool json = false;                // print a one-line JSON summary
};

// 0 on success; 2 for bad input (no such run directory, no such version, an unknown dtype);
// 1 when the store cannot be read or a version does not verify.
int run_export(const ExportArguments& arguments);

// fp32 -> bf16 by round to nearest, ties to even (as PyTorch's `.to(torch.bfloat16)`); NaN stays NaN.
uint16_t bf16_bits(float value);

}  // namespace archipelago::apps
