// The run configuration: the embedded config/default.toml, overlaid by a user file and by
// `--set section.key=value` overrides, validated and mapped onto the training option structs.
//
// Every key must exist in the default file and keep its type (an integer is accepted where a float
// is expected); anything else is rejected with an error naming the key. Pure; safe from any thread.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "training/options.hpp"

namespace archipelago::apps {

struct Config {
  training::ModelConfig model;
  training::InnerOptions inner;
  training::OuterOptions outer;
  training::DataOptions data;
  training::RunOptions run;
  std::string engine = "reference";
  std::string log_level = "info";
  std::string toml;  // the effective configuration, as TOML, for the run directory
};

// The text of config/default.toml compiled into the binary.
const std::string& default_config_text();

// `file_text`: the contents of --config (nullopt for none); `origin` names it in errors.
Expected<Config> load_config(const std::optional<std::string>& file_text, const std::string& origin,
                             const std::vector<std::string>& overrides);

}  // namespace archipelago::apps
