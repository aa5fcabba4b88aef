// The syncer actor (outer optimizer): wraps SyncerCore (actors/syncer_core.hpp) with messaging.
//
//   restoring ──Persist* + manifest──────────────> ready
//       │  (store: AdminRequest "restore")           ^
//       └──Persisted{ok=false}: nothing stored──> initializing ──Persisted{v=1, ok}
//                                             (commits version 1 = a copy of θ0)
// A syncer starts without values: the store's latest version, or θ0, gives them. Once the store
// holds a version, θ0 is released (InitialFragments) for every holder.
// ready:
//   Join            -> Welcome{latest committed version} (the state itself comes from the store)
//   FragmentUpdate* -> screened (unknown learner, duplicate sequence, wrong shape), reassembled,
//                      decoded (NaN/Inf refused), staleness-checked, queued as pending
//   tick (50 ms)    -> ready_fragments() (fragments with no commit in flight): merge + outer step
//                      (the committed value is lent to the commit: SyncerCore) ->
//                      Persist{ticket}* in windows of 32 chunks, each followed by a `taken` request
//                      (two unanswered at most), + CommitEnd{0, ticket} to the store (prepare its blobs)
//   Persisted{0, t, ok}  -> sealed in the order prepared (version, manifest), one record at a time ->
//                      CommitEnd{v, manifest, t}; fragments commit independently, so a slow write
//                      of one fragment's blobs never holds back another fragment's rounds
//   Persisted{v, t, ok}  -> commit_succeeded, then GlobalFragment* broadcast to active learners and the
//                      evaluator (announce only after commit); {!ok}, or 30 s without an answer after
//                      its last chunk -> sent again as staged under a new ticket after 1, 2, 4 … 30 s
//                      (the initial commit: a restore)
//   Leave           -> learner dead (from the monitor) or finished: the quorum shrinks
// Messages other than the restore stream are deferred while restoring/initializing. Every reject
// is counted by class and logged; nothing a learner sends can stop the syncer. Runs on the
// cooperative scheduler (merges of a small model take milliseconds).
//
// Contract (the table above is the Envelope protocol; the other shapes, all local to the process):
//   accepts  WireBytes{Join | FragmentUpdate | Leave | Persisted | Persist | CommitEnd}
//            (ledger, carry JSON)               the failure monitor's goodput ledger carry
//            (tune, key, value) -> (ok, old, new)  the admin actor's `set` (diloco/tunables.hpp)
//            checkpoint -> (ok, reason, version)   commit what is pending now, quorum or not
//            (admin, WireBytes{AdminRequest})   -> WireBytes{AdminReply}: "status"
//            tick                               self-sent only
//   sends    Persist*, CommitEnd, (taken)       to the store; GlobalFragment* to learners and evaluator
// Guarantees: a version is announced only after the store says it is durable; a learner's update
// is merged at most once; nothing a learner sends can stop the syncer.
// Commit log: once the store says a version is durable, one JSON line is appended to
// <run_dir>/commits.jsonl (kCommitLogFile), {"version", "pid", "syncer_started_unix_ms"}: the
// versions each process committed, in the order it committed them, across restarts on the same
// run directory (the recovery drills compare it with the store). No line without a run_dir.
#pragma once

#include <memory>
#include <vector>

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

#include "actors/initial_fragments.hpp"
#include "actors/runtime_options.hpp"

namespace archipelago::actors {

inline constexpr const char* kCommitLogFile = "commits.jsonl";  // in the run directory

struct SyncerSpec {
  std::shared_ptr<const RuntimeOptions> options;
  // θ0 of every fragment, for a fresh run (version 1): copied out only when the store holds no
  // version, and released once it holds one (a restarted syncer then restores from the store).
  std::shared_ptr<InitialFragments> initial_fragments;
  // Its checkpoint store actor (null: the process's, looked up by name at each use). One process
  // with several syncer shards (bench/syncer) gives each its own.
  caf::actor store;
};

caf::actor spawn_syncer(caf::actor_system& system, SyncerSpec spec);

}  // namespace archipelago::actors
