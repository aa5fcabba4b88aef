// The drill's data-parallel baseline as a real job: `archipelago train` with train.mode = "ddp"
// (run/data_parallel_job.hpp), one gloo worker process per learner slot, under the same fault
// schedule as the DiLoCo run. A data-parallel job is not elastic: when any worker dies, every
// worker restarts from rank 0's last checkpoint, and the work since is lost.
//
// How each fault lands on it: kill_learner learner-N SIGKILLs worker N; kill_node and kill_site
// SIGKILL the workers of those learner slots; kill_coordinator SIGKILLs rank 0 (the worker that
// holds the checkpoint, as a launcher's rank 0 hosts the job's store); freeze_node SIGSTOPs the
// node's workers for freeze_s; slow_learner SIGSTOPs the worker for the share of slow_s a step
// slowed slow_factor times loses (1 − 1/factor). Faults with no data-parallel counterpart
// (corrupt_update, cut_site, kill_shard) are listed as not applicable. Its goodput is the job's
// own: the measured time of the steps in its final parameters ÷ the time since its first step.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "apps/drill/observations.hpp"
#include "apps/drill/schedule.hpp"

namespace archipelago::apps::drill {

// `duration_s`: how long the job trains after its first reported round (the DiLoCo run's clock
// starts at its first commit); faults are timed from that report.
RunResult run_gloo_baseline(const DrillConfig& c, const std::vector<Fault>& schedule, const std::filesystem::path& dir,
                            const std::string& binary, double duration_s);

}  // namespace archipelago::apps::drill
