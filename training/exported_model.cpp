#include "training/exported_model.hpp"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

namespace archipelago::training {
namespace fs = std::filesystem;
namespace {

Error not_an_export(const std::string& dir, const std::string& why) {
  return make_error(ErrorCode::invalid_argument, dir + " is not an export: " + why);
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

}  // namespace

Expected<ExportedModel> read_export(const std::string& dir) {
  const fs::path root(dir);
  if (!fs::is_directory(root)) return not_an_export(dir, "no such directory");
  for (const char* name : {"config.json", "model.safetensors"}) {
    if (!fs::exists(root / name)) return not_an_export(dir, std::string("it has no ") + name);
  }
  ExportedModel out;
  out.dir = dir;
  std::ifstream config_file(root / "config.json");
  auto config = nlohmann::json::parse(config_file, nullptr, false);
  if (config.is_discarded() || !config.is_object()) return not_an_export(dir, "config.json is not a JSON object");
  if (config.value("architecture", "") != "archipelago-transformer") {
    return not_an_export(dir, "config.json's architecture is '" + config.value("architecture", "") +
                                  "', not archipelago-transformer");
  }
  try {
    out.model.vocab = config.at("vocab_size").get<int>();
    out.model.d_model = config.at("d_model").get<int>();
    out.model.layers = config.at("layers").get<int>();
    out.model.heads = config.at("heads").get<int>();
    out.model.seq_len = config.at("seq_len").get<int>();
    out.model.mlp = config.at("mlp").get<std::string>();
    out.model.preset = config.contains("source") ? config["source"].value("preset", "export") : "export";
    out.version = config.contains("source") ? config["source"].value("version", uint64_t{0}) : 0;
  } catch (const std::exception& e) {
    return not_an_export(dir, std::string("config.json: ") + e.what());
  }
  if (config.value("tokenizer", "bytes") != "bytes") {
    auto tokenizer = Tokenizer::load("spm:" + (root / "tokenizer.model").string());
    if (!tokenizer) return not_an_export(dir, tokenizer.error().reason);
    if (tokenizer->hash() != config.value("tokenizer_hash", "")) {
      return not_an_export(dir, "tokenizer.model's hash " + tokenizer->hash() + " is not config.json's tokenizer_hash");
    }
    if (tokenizer->vocab() != out.model.vocab) {
      return not_an_export(dir, "tokenizer.model has " + std::to_string(tokenizer->vocab()) + " pieces, vocab_size is " +
                                    std::to_string(out.model.vocab));
    }
    out.tokenizer = std::move(*tokenizer);
  }

  std::ifstream file(root / "model.safetensors", std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  if (bytes.size() < 8) return not_an_export(dir, "model.safetensors is shorter than its 8-byte header length");
  uint64_t header_length = 0;
  for (int i = 0; i < 8; ++i) header_length |= static_cast<uint64_t>(static_cast<uint8_t>(bytes[i])) << (8 * i);
  if (header_length > bytes.size() - 8) return not_an_export(dir, "model.safetensors' header runs past the file");
  auto header = nlohmann::json::parse(bytes.substr(8, header_length), nullptr, false);
  if (header.is_discarded() || !header.is_object()) return not_an_export(dir, "model.safetensors' header is not JSON");
  const uint64_t data_start = 8 + header_length;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") continue;
    try {
      const std::string dtype = entry.at("dtype").get<std::string>();
      const auto shape = entry.at("shape").get<std::vector<int64_t>>();
      const auto offsets = entry.at("data_offsets").get<std::vector<uint64_t>>();
      if (dtype != "F32" && dtype != "BF16") return not_an_export(dir, "tensor " + name + " is " + dtype + ", not F32 or BF16");
      const size_t element = dtype == "F32" ? 4 : 2;
      uint64_t count = 1;
      for (int64_t d : shape) count *= static_cast<uint64_t>(d);
      if (offsets.size() != 2 || offsets[1] < offsets[0] || offsets[1] - offsets[0] != count * element ||
          data_start + offsets[1] > bytes.size()) {
        return not_an_export(dir, "tensor " + name + "'s data_offsets do not fit its shape and the file");
      }
      ExportedTensor tensor;
      tensor.shape = shape;
      tensor.values.resize(count);
      const char* data = bytes.data() + data_start + offsets[0];
      for (uint64_t i = 0; i < count; ++i) {
        uint32_t bits = 0;
        if (element == 4) {
          for (int k = 0; k < 4; ++k) bits |= static_cast<uint32_t>(static_cast<uint8_t>(data[4 * i + k])) << (8 * k);
        } else {
          bits = (static_cast<uint32_t>(static_cast<uint8_t>(data[2 * i])) |
                  static_cast<uint32_t>(static_cast<uint8_t>(data[2 * i + 1])) << 8) << 16;
        }
        std::memcpy(&tensor.values[i], &bits, sizeof bits);
      }
      out.tensors.emplace(name, std::move(tensor));
    } catch (const std::exception& e) {
      return not_an_export(dir, "tensor " + name + ": " + e.what());
    }
  }
  return out;
}

Expected<std::vector<float>> exported_parameters(const ExportedModel& exported,
                                                 const std::vector<ParameterInfo>& layout) {
  std::vector<float> flat;
  for (const auto& p : layout) {
    auto it = exported.tensors.find(p.name);
    if (it == exported.tensors.end()) {
      return make_error(ErrorCode::invalid_argument, "the export " + exported.dir + " has no tensor " + p.name);
    }
    if (it->second.shape != p.shape) {
      return make_error(ErrorCode::invalid_argument, "tensor " + p.name + " is " + shape_text(it->second.shape) +
                                                         " in the export " + exported.dir + ", the model's is " +
                                                         shape_text(p.shape));
    }
    flat.insert(flat.end(), it->second.values.begin(), it->second.values.end());
  }
  return flat;
}

Expected<std::vector<float>> init_from_weights(const std::string& dir, const std::vector<ParameterInfo>& layout) {
  auto exported = read_export(dir);
  auto flat = exported ? exported_parameters(*exported, layout) : Expected<std::vector<float>>(exported.error());
  if (!flat) return make_error(ErrorCode::invalid_argument, "model.init_from: " + flat.error().reason);
  return flat;
}

}  // namespace archipelago::training
