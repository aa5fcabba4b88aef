// A node's view of a sharded run: what its learners see as the one syncer, store and monitor when
// the outer optimizer is split over syncer shards in separate processes (`coordinator --shard I
// --shards N`; shard I owns fragment p when p mod N = I, actors/runtime_options.hpp ShardOptions).
//
// One router per role is registered under the role's name (syncer, store, monitor). Each shard's
// session (run/node.cpp) attaches its facade of that role with `attach`, and detaches it (a null
// actor) when the session ends. What a learner sends goes:
//   syncer:  Join to every attached shard (and is kept: a shard whose session opens later gets the
//            learner's last Join at once); FragmentUpdate to the owner of its fragment only (none
//            attached: dropped and counted, the learner trains on); anything else to every shard.
//   store:   Fetch to every attached shard (each serves only the fragments it owns).
//   monitor: to every attached shard.
// What the shards answer comes back through `deliver`:
//   the syncer's Welcome to a Join: one Welcome for the learner once every shard accepted it, each
//            fragment's version and received-until from its owner (a refusal passes at once); a
//            shard that rejoins later sends a new merged Welcome, as a restarted coordinator would;
//   the store's Welcome to a Fetch: one merged Welcome once every shard answered (held fragments
//            and versions from their owners); the fragments themselves pass as they come;
//   anything else passes as it is.
// So a learner never sees a shard: it sees one syncer that does not go down while any shard is
// reachable, whose fragments commit on their own shards.
//
// Contract:
//   accepts  WireBytes from a learner of this node (sent to the facade it sees as the one syncer)
//            (shardmsg, shard, learner, WireBytes) an envelope from shard `shard` for `learner`
//            (attach, shard, facade)             a shard's session came (back)
// Guarantees: an update goes to its fragment's owner only; a shard that comes back gets the Joins
// of the learners it missed.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <caf/atom.hpp>

namespace archipelago::remote {

// What the routers of a node did, for its summary. Any thread.
struct ShardRouterCounters {
  std::atomic<int64_t> updates_routed{0};   // update chunks sent to their fragment's owner
  std::atomic<int64_t> updates_dropped{0};  // ... whose owner had no session (the learner trains on)
  std::atomic<int64_t> welcomes_merged{0};  // merged Welcomes given to learners (joins and fetches)
  std::atomic<int64_t> joins_replayed{0};   // learners' Joins sent to a shard whose session opened later
};

using attach_atom = caf::atom_constant<caf::atom("attach")>;
using shardmsg_atom = caf::atom_constant<caf::atom("shardmsg")>;

// Messages: (attach_atom, int32_t shard, caf::actor facade_or_null), from the node's driver;
// (shardmsg_atom, int32_t shard, caf::actor learner, WireBytes) from a shard's session watcher;
// WireBytes from a learner of this process. `role` is syncer_name(), store_name() or monitor_name().
caf::actor spawn_shard_router(caf::actor_system& system, caf::atom_value role, int shards,
                              std::shared_ptr<ShardRouterCounters> counters);

}  // namespace archipelago::remote
