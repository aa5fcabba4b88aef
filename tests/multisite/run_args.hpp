// Command lines of the coordinator and node processes the multi-process tests start.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "tests/multisite/process.hpp"

namespace multisite {

inline const std::string kData = (fs::temp_directory_path() / "archipelago-test-data").string();

inline std::vector<std::string> with_sets(std::vector<std::string> arguments, const std::vector<std::string>& sets) {
  for (const auto& s : sets) {
    arguments.push_back("--set");
    arguments.push_back(s);
  }
  return arguments;
}

inline std::vector<std::string> coordinator_args(const Scratch& s, int port, const std::vector<std::string>& extra,
                                          const std::vector<std::string>& flags = {}) {
  std::vector<std::string> arguments{"coordinator", "--json", "--listen", "127.0.0.1:" + std::to_string(port),
                                     "--run-dir", (s.dir / "run").string(), "--token-file", s.token.string()};
  arguments.insert(arguments.end(), flags.begin(), flags.end());
  auto sets = std::vector<std::string>{"model.preset=tiny", "data.tokenizer=bytes", "train.learners=4", "inner.batch_size=8",
                                       "data.eval_batches=2", "train.inner_steps=10", "runtime.store_sync=false",
                                       "train.threads=1", "data.cache_dir=" + kData, "runtime.progress_interval_s=0.3",
                                       "runtime.drain_timeout_s=5", "runtime.keep_versions=0", "inner.warmup_steps=10",
                                       // Tests start nodes under new names after others ended; the
                                       // squat test sets the grace it tries.
                                       "net.slot_grace_s=0"};
  sets.insert(sets.end(), extra.begin(), extra.end());
  return with_sets(arguments, sets);
}

inline std::vector<std::string> node_args(const Scratch& s, int port, const std::string& name,
                                   const std::vector<std::string>& flags = {}) {
  std::vector<std::string> arguments{"node", "--json", "--coordinator", "127.0.0.1:" + std::to_string(port),
                                     "--learners", "2", "--name", name, "--token-file", s.token.string(),
                                     "--set", "train.threads=1", "--set", "data.cache_dir=" + kData};
  arguments.insert(arguments.end(), flags.begin(), flags.end());
  return arguments;
}

inline void await_listening(Process& coordinator) {
  REQUIRE_MESSAGE(wait_until([&] { return coordinator.out().find("listening on") != std::string::npos ||
                                          !coordinator.running(); }, 60),
                  coordinator.all());
  REQUIRE_MESSAGE(coordinator.running(), coordinator.all());
}

// A coordinator and node-a with two of its learners, returned once 3 versions are committed.
struct TwoLearnerRun {
  std::unique_ptr<Process> coordinator, node;
};

// A console command that must be answered (exit 0, a JSON object); fails the test otherwise.
inline nlohmann::json console_answer(const fs::path& dir, const std::string& target, const std::string& command,
                                     const fs::path& token) {
  auto a = console_command(dir, target, command, token);
  INFO(command << ": " << a.out << a.err);
  REQUIRE(a.code == 0);
  auto json = a.json();
  REQUIRE(json.is_object());
  return json;
}

inline TwoLearnerRun start_two_learner_run(const Scratch& s, int port, const std::vector<std::string>& sets,
                                           const std::vector<std::string>& coordinator_flags = {}) {
  TwoLearnerRun run;
  run.coordinator = std::make_unique<Process>("coordinator", coordinator_args(s, port, sets, coordinator_flags), s.dir);
  await_listening(*run.coordinator);
  run.node = std::make_unique<Process>("node-a", node_args(s, port, "node-a"), s.dir);
  REQUIRE_MESSAGE(wait_until([&] { return run.coordinator->last_value("version") >= 3; }, 60), run.coordinator->all());
  return run;
}

// A run CA (archipelago ca) under dir/<prefix>ca and a certificate for 127.0.0.1 it signed.
inline void make_ca_and_certificate(const fs::path& dir, const std::string& prefix) {
  const auto ca = (dir / (prefix + "ca")).string();
  Process init("ca-init-" + prefix, {"ca", "init", ca}, dir);
  REQUIRE_MESSAGE(init.wait(30) == 0, init.all());
  Process issue("ca-issue-" + prefix, {"ca", "issue", ca, "node", "--host", "127.0.0.1"}, dir);
  REQUIRE_MESSAGE(issue.wait(30) == 0, issue.all());
}

// A certificate named `name` signed by dir/<prefix>ca (under TLS a node joins under its certificate's name).
inline void issue_certificate(const fs::path& dir, const std::string& prefix, const std::string& name) {
  Process issue("ca-issue-" + prefix + name, {"ca", "issue", (dir / (prefix + "ca")).string(), name}, dir);
  REQUIRE_MESSAGE(issue.wait(30) == 0, issue.all());
}

// A [net] table with dir/<prefix>ca/<name>'s certificate and key, trusting dir/<ca_prefix>ca.
inline fs::path tls_config(const fs::path& dir, const std::string& prefix, const std::string& ca_prefix,
                           const std::string& name = "node") {
  const auto path = dir / (prefix + name + "-tls.toml");
  const std::string d = dir.string();
  std::ofstream(path) << "[net]\ntls = true\ntls_certificate = \"" << d << "/" << prefix << "ca/" << name
                      << ".pem\"\ntls_key = \"" << d << "/" << prefix << "ca/" << name << ".key\"\ntls_ca = \"" << d << "/"
                      << ca_prefix << "ca/ca.pem\"\n";
  return path;
}


}  // namespace multisite
