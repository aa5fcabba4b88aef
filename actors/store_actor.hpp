// The checkpoint-store actor: the only owner of storage::CheckpointStore inside an actor system.
//
// Protocol (every message an Envelope, see actors/wire.hpp):
//   syncer  -> store  Persist* (tensor chunks of version v: the broadcast state B_p and the outer-state
//                     blob of the changed fragments, actors/fragment_state.hpp), then one Persist
//                     whose manifestJson is set (end marker, empty tensor; the manifest lists
//                     "carried" fragments taken from the newest version) -> Persisted{v, ok, reason}
//   learner -> store  Join{heldDigests} (fetch the latest committed version)
//                                                   -> Welcome{v, P, heldFragments, fragmentVersions}
//                     then GlobalFragment* (fp32 B_p, labelled with the version p last changed at) of
//                     every fragment whose digest the requester did not already hold,
//                     or Welcome{accepted=false} when nothing is committed yet
//   syncer  -> store  AdminRequest "restore"        -> the latest version replayed as Persist*
//                     (B_p + outer state of every fragment) and the manifest end marker,
//                     or Persisted{ok=false} when nothing is committed
//   anyone  -> store  (admin_atom, AdminRequest "status") -> AdminReply
// A version is announced by the syncer only after Persisted{ok}: only committed versions are ever
// served. Runs detached (synced RocksDB writes take milliseconds); the store handle is shared so a
// restarted store actor reuses the open database.
#pragma once

#include <memory>

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

#include "storage/checkpoint_store.hpp"

namespace archipelago::actors {

caf::actor spawn_store_actor(caf::actor_system& system, std::shared_ptr<storage::CheckpointStore> store);

}  // namespace archipelago::actors
