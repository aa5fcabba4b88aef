#include "apps/export_command.hpp"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "run/run_setup.hpp"
#include "apps/committed_model.hpp"
#include "common/files.hpp"
#include "training/replica.hpp"

namespace archipelago::apps {
namespace fs = std::filesystem;

uint16_t bf16_bits(float value) {
  uint32_t bits = 0;
  std::memcpy(&bits, &value, sizeof bits);
  if (std::isnan(value)) return static_cast<uint16_t>((bits >> 16) | 0x40);  // stays a (quiet) NaN
  const uint32_t rounding = 0x7FFF + ((bits >> 16) & 1);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

namespace {

struct Failure {
  int code;
  std::string message;
};

// The parameters as the safetensors file's bytes (header and data), in the layout's order.
std::string safetensors_bytes(const std::vector<training::ParameterInfo>& parameters, const std::vector<float>& flat,
                              bool bf16, uint64_t version) {
  nlohmann::ordered_json header;
  header["__metadata__"] = {{"format", "pt"}, {"producer", "archipelago"}, {"version", std::to_string(version)}};
  const size_t element = bf16 ? 2 : 4;
  size_t offset = 0;
  for (const auto& p : parameters) {
    const size_t bytes = static_cast<size_t>(p.numel) * element;
    header[p.name] = {{"dtype", bf16 ? "BF16" : "F32"}, {"shape", p.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
  std::string out(8, '\0');
  const uint64_t length = text.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((length >> (8 * i)) & 0xFF);  // little-endian
  out += text;
  out.reserve(out.size() + offset);
  for (const auto& p : parameters) {
    const float* values = flat.data() + p.offset;
    for (int64_t i = 0; i < p.numel; ++i) {
      if (bf16) {
        const uint16_t b = bf16_bits(values[i]);
        out.push_back(static_cast<char>(b & 0xFF));
        out.push_back(static_cast<char>(b >> 8));
      } else {
        uint32_t bits = 0;
        std::memcpy(&bits, &values[i], sizeof bits);
        for (int k = 0; k < 4; ++k) out.push_back(static_cast<char>((bits >> (8 * k)) & 0xFF));
      }
    }
  }
  return out;
}

const training::ParameterInfo* find_parameter(const std::vector<training::ParameterInfo>& parameters, const std::string& name) {
  for (const auto& p : parameters) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

nlohmann::ordered_json model_config_json(const training::ModelConfig& model, const training::Tokenizer& tokenizer,
                                         const std::vector<training::ParameterInfo>& parameters,
                                         int64_t parameter_count, bool bf16, const std::string& run_dir, uint64_t version) {
  const auto* up = find_parameter(parameters, "blocks.0.mlp.up.weight");
  nlohmann::ordered_json c;
  c["architecture"] = "archipelago-transformer";
  c["description"] =
      "pre-norm decoder-only transformer: x = tok_emb[t] + pos_emb[i]; per block x += attn(attn_norm(x)), "
      "x += mlp(mlp_norm(x)); logits = final_norm(x) @ tok_emb^T";
  c["vocab_size"] = model.vocab;
  c["d_model"] = model.d_model;
  c["layers"] = model.layers;
  c["heads"] = model.heads;
  c["head_dim"] = model.d_model / model.heads;
  c["seq_len"] = model.seq_len;
  c["mlp"] = model.mlp;
  c["mlp_hidden"] = up && !up->shape.empty() ? up->shape[0] : 0;
  c["activation"] = model.mlp == "swiglu" ? "silu(gate) * up" : "gelu (erf)";
  c["attention"] = "causal, softmax(q k^T / sqrt(head_dim)); qkv one Linear without bias, split [q, k, v] then heads";
  c["qk_norm"] = "layernorm over head_dim on q and k";
  c["norm"] = "layernorm";
  c["layer_norm_eps"] = 1e-5;
  c["positions"] = "learned";
  c["tied_embeddings"] = true;
  c["linear_bias"] = false;
  c["torch_dtype"] = bf16 ? "bfloat16" : "float32";
  c["parameter_count"] = parameter_count;
  c["tokenizer"] = tokenizer.byte_level() ? "bytes" : "sentencepiece";
  c["tokenizer_hash"] = tokenizer.hash();
  c["source"] = {{"producer", "archipelago"}, {"run_dir", fs::absolute(run_dir).string()}, {"version", version},
                 {"preset", model.preset}};
  return c;
}

nlohmann::ordered_json tokenizer_json(const training::Tokenizer& tokenizer) {
  if (tokenizer.byte_level()) {
    return {{"type", "bytes"},
            {"vocab_size", tokenizer.vocab()},
            {"description", "one token per byte of UTF-8 text: token id = byte value (0-255); no special tokens"}};
  }
  return {{"type", "sentencepiece"},
          {"vocab_size", tokenizer.vocab()},
          {"model_file", "tokenizer.model"},
          {"hash", tokenizer.hash()},
          {"description", "SentencePiece (sentencepiece.SentencePieceProcessor(model_file='tokenizer.model')): "
                          "identity normalization, no dummy prefix, byte fallback; decoding restores the text exactly"}};
}

}  // namespace

int run_export(const ExportArguments& arguments) {
  auto fail = [](int code, const std::string& message) {
    std::fprintf(stderr, "archipelago export: %s\n", message.c_str());
    return code;
  };
  if (arguments.dtype != "fp32" && arguments.dtype != "bf16") {
    return fail(2, "--dtype must be fp32 or bf16, not '" + arguments.dtype + "'");
  }
  const bool bf16 = arguments.dtype == "bf16";
  auto loaded = load_committed_model(arguments.run_dir, arguments.version);
  if (auto* failure = std::get_if<LoadFailure>(&loaded)) return fail(failure->exit_code, failure->message);
  auto& model_version = std::get<CommittedModel>(loaded);
  const auto& layout = *model_version.start.layout;
  const auto& runtime = model_version.runtime;
  const uint64_t version = model_version.version;
  const auto* flat = &model_version.flat;

  std::error_code ec;
  fs::create_directories(arguments.out, ec);
  if (ec) return fail(2, "cannot create " + arguments.out + ": " + ec.message());
  const fs::path out(arguments.out);
  const auto tensors = safetensors_bytes(layout.parameters, *flat, bf16, version);
  const auto model = model_config_json(runtime.setup.model, model_version.tokenizer, layout.parameters,
                                       layout.parameter_count, bf16, arguments.run_dir, version);
  if (arguments.torch_save) {
    const auto pickled = training::torch_saved_state_dict(layout.parameters, *flat, bf16);
    if (auto written = write_file_atomically((out / "model.pt").string(), std::string(pickled.begin(), pickled.end())); !written) {
      return fail(1, written.error().reason);
    }
  }
  std::vector<std::pair<std::string, std::string>> files{{"model.safetensors", tensors},
                                                         {"config.json", model.dump(2) + "\n"},
                                                         {"tokenizer.json", tokenizer_json(model_version.tokenizer).dump(2) + "\n"}};
  if (!model_version.tokenizer.byte_level()) files.emplace_back("tokenizer.model", model_version.tokenizer.model());
  for (const auto& [name, bytes] : files) {
    if (auto written = write_file_atomically((out / name).string(), bytes); !written) return fail(1, written.error().reason);
  }
  nlohmann::json summary = {{"version", version},       {"out", fs::absolute(out).string()}, {"dtype", arguments.dtype},
                            {"tensors", layout.parameters.size()}, {"parameters", layout.parameter_count},
                            {"bytes", tensors.size()}};
  std::printf("exported version %llu of %s to %s: %zu tensors, %lld parameters, %s, %zu bytes\n",
              static_cast<unsigned long long>(version), arguments.run_dir.c_str(), arguments.out.c_str(),
              layout.parameters.size(), static_cast<long long>(layout.parameter_count), arguments.dtype.c_str(),
              tensors.size());
  if (arguments.json) std::printf("%s\n", summary.dump().c_str());
  return 0;
}

}  // namespace archipelago::apps
