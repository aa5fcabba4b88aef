// Reading back what `archipelago export` writes (apps/export_command.hpp): config.json's
// architecture and model.safetensors' tensors, fp32 or bf16 (widened to fp32). `eval --export`
// scores it and `--init-from` (model.init_from) starts a run from it. No torch here.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "training/fragments.hpp"
#include "training/options.hpp"
#include "training/tokenizer.hpp"

namespace archipelago::training {

struct ExportedTensor {
  std::vector<int64_t> shape;
  std::vector<float> values;
};

struct ExportedModel {
  std::string dir;
  ModelConfig model;  // vocab, d_model, layers, heads, seq_len, mlp from config.json
  Tokenizer tokenizer;  // byte-level, or the export's tokenizer.model
  uint64_t version = 0;         // the run version it was exported from (0: unknown)
  std::map<std::string, ExportedTensor> tensors;
};

// invalid_argument, naming the file and what is wrong, when `dir` is not an export: a missing
// config.json or model.safetensors, an architecture that is not archipelago-transformer, a
// SentencePiece export without a tokenizer.model that parses and matches its hash, a header
// that does not parse, a dtype other than F32 / BF16, or offsets outside the file.
Expected<ExportedModel> read_export(const std::string& dir);

// The flat parameter vector of `layout` (a replica's parameters, in order) from the export's
// tensors by name; invalid_argument naming the tensor when one is missing or has another shape.
Expected<std::vector<float>> exported_parameters(const ExportedModel& exported,
                                                 const std::vector<ParameterInfo>& layout);

// model.init_from's weights for `layout`: read_export, then exported_parameters; the error is an
// invalid_argument that names the key.
Expected<std::vector<float>> init_from_weights(const std::string& dir, const std::vector<ParameterInfo>& layout);

}  // namespace archipelago::training
