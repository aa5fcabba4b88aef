// Goodput of a training run under chip failures, by discrete-event simulation (no training).
//
// Three ways to run the same job on the same chips:
//  ddp          non-elastic data-parallel: one synchronous group of all chips. An interruption stops
//               every chip for restart_s, and the work since the last checkpoint is redone.
//  elastic_ddp  elastic data-parallel: an interruption pauses every chip for rescale_s while the
//               group drops the failed slice and takes a spare; only the step in flight is lost.
//  decoupled    M learners of chips / M chips each, that never wait for one another (Decoupled
//               DiLoCo). An interruption stops only its learner for learner_restart_s; that learner
//               loses the work it has not yet sent (per fragment: the steps since that fragment's
//               last sync, staggered over P fragments every H steps; at most learner_checkpoint_steps
//               when it checkpoints its unsent work). While fewer than `quorum` learners are up the
//               syncer commits nothing, and a learner that fails then also loses what it sent.
//
// Interruptions: every chip is interrupted as a Poisson process of mean mtbi_hours while its group
// computes (a group of n chips: rate n / MTBI; superposing the chips' processes is exact), or every
// learner with mean learner_mtbf_s, or a random up learner every kill_every_s (a drill's schedule).
//
// A drill's faults, given how many it applied in the wall window (wall_s): each kind at seeded
// uniform times (a Poisson schedule given its count), drawn so the fault's recovery ends inside the
// window, each on a random victim that is up (a learner or node fault finding none is not applied;
// a coordinator fault due while the coordinator is down strikes as soon as it is back):
//  learner_faults      one learner fails as above, down learner_restart_s.
//  node_faults         the learners of one node (learners_per_node, consecutive) fail together, each
//                      losing its unsent work, all down node_restart_s.
//  coordinator_faults  the syncer is gone for coordinator_restart_s: every group stops (nothing it
//                      computes then counts) and loses nothing; a learner fault still hits it.
//  node_stalls         the learners of one node stop for node_stall_s (SIGSTOP) and lose nothing.
// ddp and elastic_ddp are one group: a learner or node fault interrupts it (restart_s, rescale_s).
//
// Efficiency: a computing group keeps fault_free_efficiency of its compute (the rest is the
// overhead a measured fault-free run shows: joins, sends, installs); its steps take
// step_time_s / fault_free_efficiency of wall, so the unsent work it loses is in compute seconds.
// Recovery uses hot spares: a group is whole again after its restart or rescale. Straggling: chip
// step times vary with coefficient of variation straggler_cv; a synchronous group of n chips waits
// for the slowest, so its steps take (1 + cv * E[max of n standard normals]) x step_time_s.
//
// Goodput = chip-seconds of work kept at the end (at the nominal step time) / (chips x wall time).
// Pure: a function of (config, seed); any thread.
#pragma once

#include <cstdint>
#include <string>

namespace archipelago::sim {

enum class Strategy { ddp, elastic_ddp, decoupled };

const char* strategy_name(Strategy strategy);

struct SimConfig {
  // Chips and interruptions.
  double chips = 1.2e6;
  double mtbi_hours = 8760;         // mean time between interruptions of one chip (1 year)
  double learner_mtbf_s = 0;        // > 0: every learner (or the whole ddp group) fails this often instead
  double kill_every_s = 0;          // > 0: also kill a random up learner this often (periodic, seeded choice)
  // Recovery.
  double restart_s = 60;            // ddp: restart of the whole job (reschedule, reload)
  double rescale_s = 20;            // elastic_ddp: pause of every chip to drop the failed slice
  double learner_restart_s = 20;    // decoupled: one learner's recovery (it rescales like elastic_ddp)
  double checkpoint_interval_s = 1; // ddp: compute seconds between checkpoints (1 = every step)
  double checkpoint_save_s = 0;     // ddp: pause of every chip per checkpoint
  // Training.
  int learners = 8;                 // M (decoupled)
  double step_time_s = 1.0;         // nominal compute time of one inner step
  int inner_steps = 24;             // H: steps between two syncs of one fragment
  int fragments = 24;               // P: fragments, staggered evenly over the H steps
  int quorum = 1;                   // K: learners the syncer needs to commit a round
  double grace_s = 0;               // extra wait after quorum (delays commits only; no effect on goodput here)
  int learner_checkpoint_steps = 0; // > 0: a learner saves its unsent work every N steps
  double straggler_cv = 0;          // coefficient of variation of one chip's step time
  double fault_free_efficiency = 1; // share of a computing group's time that becomes kept work, (0, 1]
  // A drill's faults (counts in the wall window; need wall_s > 0).
  int learners_per_node = 1;        // decoupled: learners per node, the victims of a node fault or stall
  int learner_faults = 0;
  int node_faults = 0;
  double node_restart_s = 20;       // decoupled: a node fault until all its learners compute again
  int coordinator_faults = 0;
  double coordinator_restart_s = 20;// every group stops this long
  int node_stalls = 0;
  double node_stall_s = 0;          // a stalled node's learners stop this long
  // Length: a fixed wall-clock window (wall_s > 0), or until the job's work is done.
  double wall_s = 0;
  double work_s = 0;                // > 0: compute seconds of the whole job on all chips; else from below
  double parameters = 5e9;          // dense model size
  double tokens = 1e12;
  double chip_flops = 300e12;       // peak FLOP/s of one chip
  double mfu = 0.4;                 // model FLOP utilisation; work_s = 6 N D / (chips x flops x mfu)
  // Monte Carlo.
  int runs = 0;                     // independent runs averaged; 0: until 20 000 interruptions (16..4096 runs)
  std::uint64_t seed = 1;
};

// The first problem with `config`, or an empty string when it is valid.
std::string validate(const SimConfig& config);

// The compute seconds of the whole job (work_s, or 6 N D / (chips x flops x mfu)).
double job_work_s(const SimConfig& config);

// E[max of n independent standard normals] (0 for n <= 1), by numerical integration.
double expected_max_normal(double n);

struct SimResult {
  double goodput = 0;           // mean over runs
  double goodput_stderr = 0;    // standard error of that mean
  double wall_s = 0;            // mean wall time of one run
  double interruptions = 0;     // mean per run
  double lost_work_share = 0;   // chip-seconds of work redone or lost / allocated chip-seconds
  double recovery_share = 0;    // chip-seconds in restart, rescale, checkpoint pauses, coordinator
                                // outages or stalls / allocated; of it (decoupled and drill faults):
  double learner_down_share = 0;     //   down after a learner fault (Poisson, kill_every_s or scheduled)
  double node_down_share = 0;        //   down after a node fault
  double coordinator_down_share = 0; //   stopped by a coordinator outage while not otherwise down
  double stall_share = 0;            //   stalled
  double overhead_share = 0;    // computing chip-seconds not kept: 1 - fault_free_efficiency of them
  double straggler_share = 0;   // chip-seconds spent waiting for the slowest chip / allocated
  double uptime = 0;            // share of wall time the job progresses: ddp and elastic_ddp compute,
                                // decoupled: at least `quorum` learners compute
  int runs = 0;
  int truncated_runs = 0;       // runs stopped after 2 000 000 events, before the job was done
                                // (their goodput is measured over the time simulated)
};

// Simulates `strategy` on `config` (which must validate). decoupled uses config.learners;
// ddp and elastic_ddp are one group of all chips.
SimResult simulate(const SimConfig& config, Strategy strategy);

}  // namespace archipelago::sim
