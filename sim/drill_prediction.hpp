// The goodput a drill should have measured, predicted by the simulator from the drill's own inputs.
//
// `archipelago drill` (apps/drill/report.cpp) writes a result.json with what it applied and what it
// measured. The prediction reads only the inputs of the model from it:
//   slots, nodes, learners_per_node        M learners, consecutive groups of a node
//   inner_steps, fragments                 H and P
//   learner_checkpoint_every               steps between learner checkpoints (0: none)
//   step_s                                 mean compute seconds of one inner step
//   wall_s                                 the DiLoCo run's wall window
//   fault_counts.{learner,node,site,coordinator,freeze,slow}   faults applied (absent: 0)
//   down_s.{learner,node,site,coordinator}.mean                 seconds each kind kept its victims down
//   sites                                  only with site faults: nodes / sites nodes per site
//   freeze_s                               optional: without it freezes are not charged
//   (other kinds in fault_counts are not modelled: named in the notes, not charged)
// and the fault-free efficiency: goodput.fault_free (the drill's fault-free run, or its
// ledger_s.fault_free parts), or options.fault_free_goodput when given (a soak has no fault-free run).
// It never reads the DiLoCo run's ledger or goodput except `goodput.diloco`, the measurement it is
// compared with.
//
// The model (sim/simulator.hpp, decoupled, quorum 1): each fault kind at seeded uniform times in the
// window with the measured count; a learner fault stops one learner for down_s.learner.mean and
// loses its unsent work; a node fault does that to every learner of the node for down_s.node.mean;
// a site fault counts as nodes/sites node faults with down_s.site.mean; a freeze stalls a node for
// freeze_s (the ledger finds the frozen time inside the step it stopped, in an update refused as
// stale). A slowdown (a node stopped part of each second, a throttled learner) is not charged: its
// steps take longer and are merged, so the ledger counts their time as merged compute; throughput
// drops, goodput does not. A coordinator outage (down_s.coordinator.mean) costs
// nothing by default: a node's learners train on while the coordinator is away, hold their updates
// until they rejoin, and the next incarnation merges that work (the drill's goodput counts it as
// merged). With outages_stop_learners it stops every learner instead and loses nothing. A computing
// learner keeps the fault-free efficiency E of its time, so
//   predicted = E - E x (down shares) - unsent share.
// Pure: a function of (result, options); any thread.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sim/simulator.hpp"

namespace archipelago::sim {

struct DrillOptions {
  double fault_free_goodput = std::numeric_limits<double>::quiet_NaN();  // finite: used as E instead of the drill's
  int runs = 2000;                                                        // Monte Carlo runs
  std::uint64_t seed = 1;
  bool outages_stop_learners = false;  // the other reading of a coordinator outage (see above)
};

struct DrillFaultCounts {
  int learner = 0, node = 0, site = 0, coordinator = 0, freeze = 0, slow = 0;
};

struct DrillPrediction {
  std::string error;  // non-empty: the result cannot be predicted, and nothing below is set
  std::string drill;
  std::uint64_t drill_seed = 0;
  int nodes = 0;
  DrillFaultCounts faults;
  bool outages_stop_learners = false;  // which reading `predicted` is
  double efficiency = 0;          // E
  std::string efficiency_source;  // where E came from, in words
  SimConfig config;               // what was simulated
  double predicted = 0, predicted_stderr = 0, measured = 0, difference = 0;  // difference = predicted - measured
  // The other reading of a coordinator outage (options.outages_stop_learners flipped), simulated too.
  double predicted_other_reading = 0;
  double outage_share = 0;  // E x every slot's time while the coordinator was down (as simulated)
  // Goodput lost, as shares of the allocated slot time: predicted = E - the sum of these.
  double lost_to_learner_faults = 0;       // E x learners' down time after learner faults
  double lost_to_node_faults = 0;          // E x learners' down time after node and site faults
  double lost_to_coordinator_outages = 0;  // outages_stop_learners: outage_share; else 0
  double lost_to_stalls = 0;               // E x frozen learners' time
  double lost_unsent_work = 0;             // unsent work the failed learners lost
  std::vector<std::string> notes;          // approximations made and faults not charged
};

// Reads `result` (a drill's result.json) and simulates it. A result lacking a field the model needs
// gets an error naming every missing field.
DrillPrediction predict_drill(const nlohmann::json& result, const DrillOptions& options);

// One object: drill, seed, predicted, predicted_stderr, measured, difference, outages_stop_learners,
// predicted_other_reading, outage_share, fault_free_efficiency,
// fault_free_source, lost {learner_faults, node_faults, coordinator_outages, stalls, unsent_work},
// inputs (the simulated SimConfig's drill keys), notes.
nlohmann::json to_json(const DrillPrediction& prediction);

// The inputs, the parts and predicted vs measured, as aligned text tables.
std::string prediction_table(const DrillPrediction& prediction);

}  // namespace archipelago::sim
