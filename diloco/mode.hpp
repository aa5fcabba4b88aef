// The run's mode: how learners and the outer optimizer meet (DESIGN.md, "Modes of the outer
// optimizer"), and every rule that depends on it.
//
//   sync       classic DiLoCo: every learner runs H steps, the round waits for all live learners
//   decoupled  rounds per fragment on a staggered schedule; a round closes on quorum + grace window
//   async      one outer step per arriving update (Delayed Nesterov), dynamic local steps
//   ddp        the data-parallel baseline: gradients averaged every step
//
// A mode is parsed from its name once, where a configuration or a wire message is read; past that
// point code asks these functions, never compares names. Pure; any thread.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/error.hpp"

namespace archipelago::diloco {

enum class Mode { sync, decoupled, async, ddp };

// Every mode, in the order above (tables, help texts, error messages).
const std::vector<Mode>& all_modes();
// "sync", "decoupled", "async", "ddp".
const char* mode_name(Mode mode);
// The mode named `name`; invalid_argument naming the known ones otherwise.
Expected<Mode> parse_mode(std::string_view name);

// Which engine runs a run (train.engine).
enum class Engine { actors, reference };
const char* engine_name(Engine engine);
Expected<Engine> parse_engine(std::string_view name);
// The modes an engine runs: the actor runtime runs all four, the reference engine sync and ddp.
bool engine_runs(Engine engine, Mode mode);
// Ok, or invalid_argument saying which modes the engine runs.
Status check_engine_mode(Engine engine, Mode mode);

// ---- Rules that depend on the mode ----------------------------------------------------------------
// Fragments are synchronised on the staggered schedule (offset p·H/P): decoupled and async.
bool staggered(Mode mode);
// A learner adapts its local steps to its speed (Liu et al.'s DyLU): async.
bool dynamic_local_steps(Mode mode);
// Every learner stops on a whole round (H steps), so no round is left half-run: sync and ddp.
bool whole_rounds(Mode mode);
// A learner stops at the round barrier until its last update merged: sync.
bool round_barrier(Mode mode);
// A fragment runs numbered rounds that close on the quorum and the grace window: decoupled.
bool numbered_rounds(Mode mode);
// Every accepted update is merged on arrival: async and ddp.
bool merge_on_arrival(Mode mode);
// The learners' work is one data-parallel job: ddp (one learner averages every shard's gradient).
bool data_parallel(Mode mode);
// The outer optimizer may be split into shards (coordinator --shards N): decoupled and async,
// whose fragments never wait for one another.
bool shardable(Mode mode);
// Learners may run in node processes of other sites (coordinator + nodes): every mode but ddp,
// whose one learner averages every shard's gradient in memory.
bool runs_across_processes(Mode mode);
// Ok, or invalid_argument naming the modes a coordinator runs.
Status check_across_processes(Mode mode);

// ---- The outer optimizer's rule (outer.optimizer, as a mode runs it) ----------------------------
//
// A commit merges what arrived; its pseudo-gradient counts for its share of a round, the
// contributions it merged ÷ the learners a round expects (train.learners), and its work is the
// steps it merged ÷ (those learners × H). ALGORITHMS.md §5b.
enum class OuterRule {
  nesterov,             // sync: one Nesterov step per round (a commit is a whole round)
  work_clock,           // decoupled, async: plain steps per commit, momentum once per round of work
                        // (Delayed Nesterov with N counted in rounds of work): outer.optimizer auto / nesterov
  per_commit_nesterov,  // decoupled, async: one Nesterov step per commit, whatever work it merged (the former rule)
  delayed_nesterov,     // decoupled, async: Delayed Nesterov counted in arrivals (N = outer.delayed_every)
  memoryless,           // plain steps θ ← θ − lr·g at the work share, no momentum (peers use outer.lr = 1)
  average,              // ddp: θ ← θ − merged Δ, no outer optimizer
};

// "nesterov", "work_clock", "per_commit_nesterov", "delayed_nesterov", "memoryless", "average".
const char* outer_rule_name(OuterRule rule);

// The rule `optimizer` (outer.optimizer) names in `mode`; invalid_argument naming the key and the
// values the mode takes when the mode would ignore it (ddp has no outer optimizer; a sync round is
// always whole, so the per-commit and per-arrival rules do not apply there).
Expected<OuterRule> outer_rule(Mode mode, std::string_view optimizer);

}  // namespace archipelago::diloco
