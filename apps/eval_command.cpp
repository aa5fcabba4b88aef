#include "apps/eval_command.hpp"

#include <cstdio>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "apps/committed_model.hpp"
#include "training/exported_model.hpp"
#include "training/text_score.hpp"
#include "training/tokenizer.hpp"

namespace archipelago::apps {

int run_eval(const EvalArguments& arguments) {
  auto fail = [](int code, const std::string& message) {
    std::fprintf(stderr, "archipelago eval: %s\n", message.c_str());
    return code;
  };
  if (arguments.run_dirs.empty() == arguments.export_dir.empty()) {
    return fail(2, "give one model: --run-dir R (a committed version) or --export DIR");
  }
  if (arguments.batch_size < 1) return fail(2, "--batch-size must be >= 1");
  std::ifstream file(arguments.text, std::ios::binary);
  if (!std::filesystem::is_regular_file(arguments.text) || !file) return fail(2, "no text file " + arguments.text);
  std::string text((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  if (arguments.max_bytes > 0 && static_cast<int64_t>(text.size()) > arguments.max_bytes) text.resize(arguments.max_bytes);
  if (text.size() < 2) return fail(2, arguments.text + " has fewer than 2 bytes: nothing to predict");

  std::unique_ptr<training::Replica> replica;
  training::Tokenizer tokenizer;
  nlohmann::json source;
  std::string described;
  if (!arguments.run_dirs.empty()) {
    auto loaded = load_committed_model(arguments.run_dirs, arguments.versions);
    if (auto* failure = std::get_if<LoadFailure>(&loaded)) return fail(failure->exit_code, failure->message);
    auto& model = std::get<CommittedModel>(loaded);
    replica = std::move(model.start.replica);
    replica->write_parameters(model.flat);
    tokenizer = model.tokenizer;
    if (model.shard_versions.empty()) {
      source = {{"run_dir", arguments.run_dirs.front()}, {"version", model.version}};
      described = "version " + std::to_string(model.version) + " of " + arguments.run_dirs.front();
    } else {
      source = {{"run_dirs", model.shard_run_dirs}, {"shard_versions", model.shard_versions}};
      described = "versions " + nlohmann::json(model.shard_versions).dump() + " of the shards " +
                  nlohmann::json(model.shard_run_dirs).dump();
    }
  } else {
    auto exported = training::read_export(arguments.export_dir);
    if (!exported) return fail(2, exported.error().reason);
    auto created = training::Replica::create(exported->model, training::InnerOptions{}, "cpu", 0);
    if (!created) return fail(2, "the export's model: " + created.error().reason);
    replica = std::move(*created);
    auto flat = training::exported_parameters(*exported, replica->parameters());
    if (!flat) return fail(2, flat.error().reason);
    replica->write_parameters(*flat);
    tokenizer = exported->tokenizer;
    source = {{"export", arguments.export_dir}, {"version", exported->version}};
    described = "export " + arguments.export_dir;
  }
  const auto score = training::score_text(*replica, tokenizer, text, arguments.batch_size);
  std::printf("%s: loss %.4f nats/token, %.4f bits per byte over %lld bytes of %s\n",
              described.c_str(), score.loss, score.bits_per_byte, static_cast<long long>(score.bytes), arguments.text.c_str());
  if (arguments.json) {
    source["text"] = arguments.text;
    source["tokenizer"] = tokenizer.hash();
    source["tokens"] = score.tokens;
    source["bytes"] = score.bytes;
    source["loss"] = score.loss;
    source["bits_per_byte"] = score.bits_per_byte;
    std::printf("%s\n", source.dump().c_str());
  }
  return 0;
}

}  // namespace archipelago::apps
