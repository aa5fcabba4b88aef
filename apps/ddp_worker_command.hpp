// `archipelago ddp-worker`: one worker of a data-parallel job on gloo (run/data_parallel_job.hpp).
// `archipelago train` with train.mode = "ddp" starts them itself; across machines each is started
// by hand with the same configuration and the address of a rendezvous store:
//
//   archipelago ddp-worker --config run.toml --store HOST:PORT --rank R --world M [--bind ADDRESS]
//                          [--checkpoint FILE] [--host-store]
//
// It prints rank 0's progress lines and, as its last line, its result as JSON (measured bytes,
// the final parameters' digest). Exit codes: 0 done, 1 a failure a restart may outlive (a peer
// gone), 2 a configuration error, 3 a checkpoint that cannot be resumed (corrupt, another model).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace archipelago::apps {

struct DdpWorkerArguments {
  std::string config_file;
  std::vector<std::string> overrides;
  std::string store;                 // HOST:PORT of the rendezvous store
  std::string bind = "127.0.0.1";    // the address this worker's gloo pairs listen on
  int rank = 0;
  int world = 1;
  int threads = 0;                   // LibTorch intra-op threads (0: train.threads)
  bool host_store = false;           // rank 0 hosts the store itself at --store (a job started by hand)
  std::string checkpoint;            // rank 0's checkpoint file: resumed from when it exists, written at every report
  int64_t deadline_ms = 0;           // stop at this time (system clock, ms since the epoch) instead of train.max_seconds
};

int run_ddp_worker(const DdpWorkerArguments& arguments);

}  // namespace archipelago::apps
