#include "training/options.hpp"

namespace archipelago::training {

Expected<ModelConfig> model_preset(const std::string& name) {
  ModelConfig config;
  config.preset = name;
  if (name == "tiny") {
    config.d_model = 64;
    config.layers = 2;
    config.heads = 2;
    config.seq_len = 64;
  } else if (name == "small") {
    config.d_model = 256;
    config.layers = 4;
    config.heads = 4;
    config.seq_len = 128;
  } else if (name == "base") {
    config.d_model = 512;
    config.layers = 8;
    config.heads = 8;
    config.seq_len = 256;
  } else {
    return make_error(ErrorCode::invalid_argument,
                      "model.preset: unknown preset '" + name + "' (expected tiny, small or base)");
  }
  return config;
}

}  // namespace archipelago::training
