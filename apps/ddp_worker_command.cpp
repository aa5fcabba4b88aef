#include "apps/ddp_worker_command.hpp"

#include <cstdio>
#include <memory>

#include "apps/config.hpp"
#include "common/log.hpp"
#include "remote/remote_protocol.hpp"
#include "run/data_parallel_job.hpp"
#include "training/data_parallel.hpp"
#include "training/gloo_group.hpp"
#include "training/precision_choice.hpp"
#include "training/replica.hpp"

namespace archipelago::apps {

int run_ddp_worker(const DdpWorkerArguments& arguments) {
  auto fail = [](const std::string& reason, int code) {
    std::fprintf(stderr, "archipelago ddp-worker: %s\n", reason.c_str());
    return code;
  };
  auto file = read_config_file(arguments.config_file);
  if (!file) return fail(file.error().reason, 2);
  auto config = load_config(file->text, file->origin, arguments.overrides);
  if (!config) return fail("invalid configuration: " + config.error().reason, 2);
  auto store = remote::parse_host_port(arguments.store);
  if (!store) return fail("--store " + store.error().reason, 2);
  if (config->run.learners != arguments.world) {
    return fail("--world " + std::to_string(arguments.world) + " but train.learners is " +
                    std::to_string(config->run.learners), 2);
  }
  init_logging({"ddp-" + std::to_string(arguments.rank), config->log_level, ""});
  const int threads = arguments.threads > 0 ? arguments.threads : config->run.threads;
  const auto precision = training::choose_precision({config->model, config->inner, config->run.device, threads});
  config->inner.precision = precision.precision;
  training::set_compute_threads(threads, precision.precision);

  auto corpus = training::load_corpus(config->data);
  if (!corpus) return fail("corpus: " + corpus.error().reason, 1);
  auto shared_corpus = std::make_shared<const training::Corpus>(std::move(*corpus));

  std::unique_ptr<training::RendezvousHost> hosted;
  if (arguments.host_store && arguments.rank == 0) {
    auto started = training::RendezvousHost::start(store->host, store->port);
    if (!started) return fail(started.error().reason, 1);
    hosted = std::move(*started);
  }
  training::GroupPlace place;
  place.store_host = store->host;
  place.store_port = store->port;
  place.bind_host = arguments.bind;
  place.rank = arguments.rank;
  place.world = arguments.world;
  auto group = training::GlooGroup::join(place);
  if (!group) return fail(group.error().reason, 1);

  training::ReferenceSetup setup{config->model, config->inner, config->outer, config->data, config->run};
  auto result = training::run_data_parallel_worker(setup, shared_corpus, **group, arguments.checkpoint, arguments.deadline_ms, [](const training::ProgressPoint& p) {
    std::printf("%s\n", run::progress_line(p).c_str());
    std::fflush(stdout);
  });
  if (!result) {
    // 2: a configuration error, 3: a checkpoint that cannot be resumed; a restart mends neither. 1: a
    // failure a restart may outlive (a peer gone).
    const auto code = result.error().code;
    return fail(result.error().reason, code == ErrorCode::invalid_argument                          ? 2
                                       : code == ErrorCode::corrupt || code == ErrorCode::inconsistent ? 3
                                                                                                       : 1);
  }
  std::printf("%s\n", run::worker_result_line(*result).c_str());
  std::fflush(stdout);
  return 0;
}

}  // namespace archipelago::apps
