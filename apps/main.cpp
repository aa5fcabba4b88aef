// archipelago: fault-tolerant, low-communication training of language models across sites.
// This file only parses arguments and hands over to one command.
#include <CLI/CLI.hpp>

#include "apps/train_command.hpp"

int main(int argc, char** argv) {
  CLI::App app{"Archipelago: fault-tolerant, low-communication training of language models across sites"};
  app.require_subcommand(1);

  archipelago::apps::TrainArguments train;
  auto* train_command = app.add_subcommand("train", "train a model on this machine (embedded default config)");
  train_command->add_option_function<std::string>("--config", [&](const std::string& v) { train.config_file = v; },
                                                  "TOML file overriding config/default.toml")
      ->check(CLI::ExistingFile);
  train_command->add_option("--set", train.overrides, "override one key: section.key=value (repeatable)")
      ->allow_extra_args(false);
  train_command->add_option_function<std::string>("--engine", [&](const std::string& v) { train.engine = v; },
                                                  "reference (sequential, no actors)");
  train_command->add_option_function<std::string>("--device", [&](const std::string& v) { train.device = v; },
                                                  "cpu | cuda | cuda:N");
  train_command->add_option_function<std::string>("--corpus", [&](const std::string& v) { train.corpus = v; },
                                                  "\"kjv\" or a UTF-8 text file or directory");
  train_command->add_option("--run-dir", train.run_dir, "run directory (default archipelago-runs/<run-id>)");
  train_command->add_flag("--json", train.json, "print a one-line JSON summary as the last line of stdout");

  CLI11_PARSE(app, argc, argv);
  if (train_command->parsed()) return archipelago::apps::run_train(train);
  return 2;
}
