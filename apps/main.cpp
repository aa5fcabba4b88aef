// archipelago: fault-tolerant, low-communication training of language models across sites.
// This file only parses arguments and hands over to one command.
#include <csignal>

#include <CLI/CLI.hpp>

#include "apps/ca_command.hpp"
#include "apps/console_command.hpp"
#include "apps/coordinator_command.hpp"
#include "apps/drill_command.hpp"
#include "apps/export_command.hpp"
#include "apps/ddp_worker_command.hpp"
#include "apps/eval_command.hpp"
#include "apps/sample_command.hpp"
#include "apps/tokenizer_command.hpp"
#include "apps/node_command.hpp"
#include "apps/train_command.hpp"
#include "sim/sim_command.hpp"

int main(int argc, char** argv) {
  // A peer closing its socket mid-write must be an error on that write (EPIPE), never a killed process.
  std::signal(SIGPIPE, SIG_IGN);
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
                                                  "actors (default: the actor runtime) | reference (sequential, no actors)");
  train_command->add_option_function<std::string>("--device", [&](const std::string& v) { train.device = v; },
                                                  "cpu | cuda | cuda:N");
  train_command->add_option_function<std::string>("--corpus", [&](const std::string& v) { train.corpus = v; },
                                                  "\"kjv\" or a UTF-8 text file or directory");
  train_command->add_option("--run-dir", train.run_dir, "run directory (default archipelago-runs/<run-id>)");
  train_command->add_option("--resume", train.resume_dir,
                            "continue the run in this directory from its latest committed version")
      ->check(CLI::ExistingDirectory);
  train_command->add_flag("--json", train.json, "print a one-line JSON summary as the last line of stdout");
  train_command->add_option_function<std::string>("--init-from", [&](const std::string& v) { train.init_from = v; },
                                                  "start from an export's weights (model.init_from)");
  train_command->add_flag_function("--no-sample", [&](int64_t) { train.sample = false; },
                                   "do not print a sample of the final version under the summary");
  train_command->add_option_function<std::string>("--admin-listen", [&](const std::string& v) { train.admin_listen = v; },
                                                  "HOST:PORT for `archipelago console` (needs an admin token)");
  train_command->add_option_function<std::string>("--admin-token-file",
                                                  [&](const std::string& v) { train.admin_token_file = v; },
                                                  "file holding the admin console's secret (else $ARCHIPELAGO_ADMIN_TOKEN_FILE)");
  train_command->add_option_function<std::string>("--metrics-listen", [&](const std::string& v) { train.metrics_listen = v; },
                                                  "HOST:PORT for Prometheus /metrics and the status page / "
                                                  "(off a loopback address: bearer metrics token required)");
  train_command->add_option_function<std::string>("--metrics-token-file", [&](const std::string& v) { train.metrics_token_file = v; },
                                                  "file holding /metrics' read-only token (else $ARCHIPELAGO_METRICS_TOKEN_FILE)");

  archipelago::apps::CoordinatorArguments coordinator;
  auto* coordinator_command =
      app.add_subcommand("coordinator", "run the coordinator of a multi-site run (syncer, monitor, store, evaluator)");
  coordinator_command->add_option_function<std::string>("--config", [&](const std::string& v) { coordinator.config_file = v; },
                                                        "TOML file overriding config/default.toml; may hold [sites] and [links]")
      ->check(CLI::ExistingFile);
  coordinator_command->add_option("--set", coordinator.overrides, "override one key: section.key=value (repeatable)")
      ->allow_extra_args(false);
  coordinator_command->add_option("--listen", coordinator.listen, "HOST:PORT to accept nodes on (default 127.0.0.1:4242)");
  coordinator_command->add_option("--run-dir", coordinator.run_dir, "run directory: RocksDB store and logs; reusing it resumes")
      ->required();
  coordinator_command->add_option_function<std::string>("--token-file", [&](const std::string& v) { coordinator.token_file = v; },
                                                        "file holding the join secret (else $ARCHIPELAGO_TOKEN_FILE)");
  coordinator_command->add_option_function<std::string>("--admin-token-file",
                                                        [&](const std::string& v) { coordinator.admin_token_file = v; },
                                                        "file holding the admin console's secret (else "
                                                        "$ARCHIPELAGO_ADMIN_TOKEN_FILE; without one, no console)");
  coordinator_command->add_option_function<std::string>("--metrics-listen",
                                                        [&](const std::string& v) { coordinator.metrics_listen = v; },
                                                        "HOST:PORT for Prometheus /metrics and the status page / "
                                                        "(off a loopback address: bearer metrics token required)");
  coordinator_command->add_option_function<std::string>("--metrics-token-file",
                                                        [&](const std::string& v) { coordinator.metrics_token_file = v; },
                                                        "file holding /metrics' read-only token (else $ARCHIPELAGO_METRICS_TOKEN_FILE)");
  coordinator_command->add_option_function<std::string>("--site", [&](const std::string& v) { coordinator.site = v; },
                                                        "this process's site (default: the [sites] coordinator, else local)");
  coordinator_command->add_option("--shard", coordinator.shard,
                                  "run syncer shard I of --shards N: it owns fragment p when p mod N = I (default 0)");
  coordinator_command->add_option("--shards", coordinator.shards,
                                  "syncer shards of the run, one coordinator process each (default 1); nodes name "
                                  "every shard's address, shard 0's first");
  coordinator_command->add_flag("--json", coordinator.json, "print a one-line JSON summary as the last line of stdout");
  coordinator_command->add_flag("--insecure-plaintext", coordinator.insecure_plaintext,
                                "listen without TLS on a non-loopback address (join proofs and updates in clear)");

  archipelago::apps::NodeArguments node;
  auto* node_command = app.add_subcommand("node", "run a node: learners that join a coordinator and train");
  node_command->add_option("--coordinator", node.coordinator,
                           "HOST:PORT of the coordinator; of a sharded run, every shard's, shard 0's first "
                           "(comma-separated)")->required();
  node_command->add_option("--learners", node.learners, "learners on this node (default 1)")->check(CLI::PositiveNumber);
  node_command->add_option("--site", node.site, "this node's site, as named in [sites] (default local)");
  node_command->add_option_function<std::string>("--name", [&](const std::string& v) { node.name = v; },
                                                 "node name in logs and link accounting: 1-64 bytes of A-Z a-z 0-9 . _ - (default: under TLS its certificate's name, else HOST-PID)");
  node_command->add_option_function<std::string>("--device", [&](const std::string& v) { node.device = v; },
                                                 "cpu | cuda | cuda:N");
  node_command->add_option_function<std::string>("--token-file", [&](const std::string& v) { node.token_file = v; },
                                                 "file holding the join secret (else $ARCHIPELAGO_TOKEN_FILE)");
  node_command->add_option_function<std::string>("--config", [&](const std::string& v) { node.config_file = v; },
                                                 "local TOML ([net]: timeouts, TLS files)")
      ->check(CLI::ExistingFile);
  node_command->add_option("--set", node.overrides,
                           "section.key=value (repeatable), applied locally and over the coordinator's configuration")
      ->allow_extra_args(false);
  node_command->add_option("--state-dir", node.state_dir,
                           "directory for this node's learner checkpoints (<dir>/learners/); with it a restarted "
                           "node's learners continue their unsent work and data positions");
  node_command->add_option_function<std::string>("--log-file", [&](const std::string& v) { node.log_file = v; },
                                                 "also append logs to this file");
  node_command->add_option("--give-up-after", node.give_up_after_s,
                           "exit with an error after this many seconds without the coordinator (default 0: never)");
  node_command->add_flag("--json", node.json, "print a one-line JSON summary as the last line of stdout");
  node_command->add_flag("--insecure-plaintext", node.insecure_plaintext,
                         "dial a non-loopback coordinator without TLS (the session in clear)");
  node_command->add_flag("--drill-hooks", node.drill_hooks,
                         "recovery drills only: let the coordinator's operator corrupt this node's next update "
                         "(console `corrupt`); never on a production node");

  archipelago::apps::ConsoleArguments console;
  auto* console_command = app.add_subcommand("console", "inspect a running coordinator: a prompt, or one command with -c");
  console_command->add_option("target", console.target,
                              "HOST:PORT of the coordinator; of a sharded run, every shard's, comma-separated, shard 0 "
                              "first")->required();
  console_command->add_option("-c,--command", console.command, "run one command, print its answer, exit (non-zero on error)");
  console_command->add_flag("--json", console.json, "print answers as one JSON line");
  console_command->add_flag("--insecure-plaintext", console.insecure_plaintext,
                            "dial a non-loopback coordinator without TLS (the session in clear)");
  console_command->add_option_function<std::string>("--admin-token-file", [&](const std::string& v) { console.admin_token_file = v; },
                                                    "file holding the admin secret (else $ARCHIPELAGO_ADMIN_TOKEN_FILE)");
  console_command->add_option_function<std::string>("--config", [&](const std::string& v) { console.config_file = v; },
                                                    "local TOML ([net]: timeouts, TLS files)")
      ->check(CLI::ExistingFile);

  archipelago::apps::DrillArguments drill;
  auto* drill_command = app.add_subcommand("drill", "a seeded recovery drill: a real coordinator and nodes on loopback, "
                                                    "faults on a schedule, invariants checked, a report");
  drill_command->add_option("--config", drill.config_file, "the drill: config/drills/NAME.toml")->required()->check(CLI::ExistingFile);
  drill_command->add_option("--seed", drill.seed, "seed of the fault schedule (default 1)");
  drill_command->add_flag("--json", drill.json, "print a one-line JSON result as the last line of stdout");
  drill_command->add_option("--report", drill.report_dir, "directory for report.md, SVGs and the runs (default archipelago-runs/drill-NAME-SEED)");
  drill_command->add_option_function<double>("--duration", [&](double v) { drill.duration_s = v; },
                                             "seconds per run (overrides the drill's duration_s; with --kills: a cap)");
  drill_command->add_option_function<int>("--kills", [&](int v) { drill.kills = v; },
                                          "soak: run the DiLoCo cluster until this many kills were applied (no baseline runs)");

  archipelago::sim::SimArguments sim;
  auto* sim_command =
      app.add_subcommand("sim", "simulate goodput under chip failures and the bandwidth DiLoCo needs (no training)");
  archipelago::sim::add_sim_options(*sim_command, sim);

  archipelago::apps::CaArguments ca;
  auto* ca_command = app.add_subcommand("ca", "the run's certificate authority for mutual TLS: `ca init DIR`, "
                                              "`ca issue DIR NAME [--host H ...] [--days N]`");
  archipelago::apps::add_ca_options(*ca_command, ca);

  archipelago::apps::ExportArguments export_arguments;
  auto* export_command = app.add_subcommand(
      "export", "write a committed version as model.safetensors, config.json and tokenizer.json (PyTorch and "
                "other tools load them)");
  export_command->add_option("--run-dir", export_arguments.run_dir, "the run's directory (its config.toml and store/)")
      ->required();
  export_command->add_option_function<uint64_t>("--version", [&](uint64_t v) { export_arguments.version = v; },
                                                "the committed version (default: the latest)");
  export_command->add_option("--out", export_arguments.out, "the export directory (created)")->required();
  export_command->add_option("--dtype", export_arguments.dtype, "fp32 (default) | bf16");
  export_command->add_flag("--torch-save", export_arguments.torch_save,
                           "also write model.pt, the state dict as torch.save writes it (torch.load opens it)");
  export_command->add_flag("--json", export_arguments.json, "print a one-line JSON summary as the last line of stdout");

  archipelago::apps::SampleArguments sample;
  auto* sample_command = app.add_subcommand(
      "sample", "generate text with a committed version of a run (KV cache; a seed gives the same text every time)");
  sample_command->add_option("--run-dir", sample.run_dir, "the run's directory (its config.toml and store/)")->required();
  sample_command->add_option_function<uint64_t>("--version", [&](uint64_t v) { sample.version = v; },
                                                "the committed version (default: the latest)");
  sample_command->add_option("--prompt", sample.prompt, "the text to continue (default: a newline)");
  sample_command->add_option("--tokens", sample.sampling.tokens, "tokens to generate (default 256)");
  sample_command->add_option("--temperature", sample.sampling.temperature, "0: greedy (default 0.8)");
  sample_command->add_option("--top-k", sample.sampling.top_k, "draw from the k most likely tokens (default 0: all)");
  sample_command->add_option("--top-p", sample.sampling.top_p, "draw from the nucleus of mass p (default 1: all)");
  sample_command->add_option("--seed", sample.sampling.seed, "the draws' seed (default 0)");
  sample_command->add_flag_function("--no-cache", [&](int64_t) { sample.sampling.kv_cache = false; },
                                    "run the whole context for each token (slower; for comparison)");
  sample_command->add_flag("--json", sample.json, "print a one-line JSON summary as the last line of stdout");

  archipelago::apps::EvalArguments eval;
  auto* eval_command = app.add_subcommand(
      "eval", "loss and bits per byte of a committed version or an export on a text file");
  eval_command->add_option("--run-dir", eval.run_dirs,
                           "a run's directory: score one of its committed versions (a sharded run: once per shard)");
  eval_command->add_option("--version", eval.versions,
                           "the committed version (default: the latest; a sharded run: once per --run-dir)");
  eval_command->add_option("--export", eval.export_dir, "an export directory (archipelago export) instead");
  eval_command->add_option("--text", eval.text, "the text file to score")->required();
  eval_command->add_option("--max-bytes", eval.max_bytes, "score only the first N bytes (default: all)");
  eval_command->add_option("--batch-size", eval.batch_size, "context windows per pass (default 16)");
  eval_command->add_flag("--json", eval.json, "print a one-line JSON summary as the last line of stdout "
                                              "(--follow: one per version scored)");
  eval_command->add_flag("--follow", eval.follow,
                         "follow a live run (read-only, while it trains): score the model assembled from every "
                         "shard's latest committed version each time one changes");
  eval_command->add_option("--every", eval.every_s, "--follow: seconds between checks of the stores (default 10)");
  eval_command->add_option("--for", eval.for_s, "--follow: stop after this many seconds (default: at SIGINT or SIGTERM)");

  archipelago::apps::TokenizerArguments tokenizer;
  auto* tokenizer_command = app.add_subcommand("tokenizer", "subword tokenizers for data.tokenizer: `tokenizer train`");
  tokenizer_command->require_subcommand(1);
  auto* tokenizer_train = tokenizer_command->add_subcommand(
      "train", "train a SentencePiece model on a corpus (exact round trip: no normalization, byte fallback)");
  tokenizer_train->add_option("--corpus", tokenizer.corpus, "\"kjv\", a text file or a directory (as data.corpus)")->required();
  tokenizer_train->add_option("--vocab", tokenizer.vocab, "vocabulary size (default 8192)")->required();
  tokenizer_train->add_option("--out", tokenizer.out, "the model file to write")->required();
  tokenizer_train->add_option("--type", tokenizer.type, "bpe (default) or unigram");
  tokenizer_train->add_option("--cache-dir", tokenizer.cache_dir, "where the kjv text is cached (as data.cache_dir)");
  tokenizer_train->add_flag("--json", tokenizer.json, "print a one-line JSON summary as the last line of stdout");

  archipelago::apps::DdpWorkerArguments ddp_worker;
  auto* ddp_worker_command = app.add_subcommand(
      "ddp-worker", "one worker of a data-parallel job on gloo (train.mode = \"ddp\"; `train` starts them itself)");
  ddp_worker_command->add_option("--config", ddp_worker.config_file, "the run's TOML configuration")
      ->required()->check(CLI::ExistingFile);
  ddp_worker_command->add_option("--set", ddp_worker.overrides, "override one key: section.key=value (repeatable)")
      ->allow_extra_args(false);
  ddp_worker_command->add_option("--store", ddp_worker.store, "HOST:PORT of the job's rendezvous store")->required();
  ddp_worker_command->add_option("--rank", ddp_worker.rank, "this worker's rank, 0 .. world - 1")->required();
  ddp_worker_command->add_option("--world", ddp_worker.world, "the number of workers (train.learners)")->required();
  ddp_worker_command->add_option("--bind", ddp_worker.bind, "the address this worker's all-reduce sockets listen on");
  ddp_worker_command->add_option("--threads", ddp_worker.threads, "LibTorch intra-op threads (default train.threads)");
  ddp_worker_command->add_flag("--host-store", ddp_worker.host_store, "rank 0 hosts the rendezvous store at --store");
  ddp_worker_command->add_option("--checkpoint", ddp_worker.checkpoint,
                                 "rank 0's checkpoint file: the job resumes from it, rank 0 rewrites it at every report");
  ddp_worker_command->add_option("--deadline-ms", ddp_worker.deadline_ms,
                                 "stop at this time (ms since the epoch) instead of train.max_seconds after start");

  CLI11_PARSE(app, argc, argv);
  if (ddp_worker_command->parsed()) return archipelago::apps::run_ddp_worker(ddp_worker);
  if (tokenizer_train->parsed()) return archipelago::apps::run_tokenizer_train(tokenizer);
  if (eval_command->parsed()) return archipelago::apps::run_eval(eval);
  if (sample_command->parsed()) return archipelago::apps::run_sample(sample);
  if (export_command->parsed()) return archipelago::apps::run_export(export_arguments);
  if (ca_command->parsed()) return archipelago::apps::run_ca(ca);
  if (sim_command->parsed()) return archipelago::sim::run_sim(sim);
  if (drill_command->parsed()) return archipelago::apps::run_drill(drill);
  if (console_command->parsed()) return archipelago::apps::run_console(console);
  if (train_command->parsed()) return archipelago::apps::run_train(train);
  if (coordinator_command->parsed()) return archipelago::apps::run_coordinator(coordinator);
  if (node_command->parsed()) return archipelago::apps::run_node(node);
  return 2;
}
