// The checkpoint-store actor: the only owner of storage::CheckpointStore inside an actor system.
//
// Protocol (every message an Envelope, see actors/wire.hpp):
//   syncer  -> store  Persist{ticket t}* (tensor chunks of a commit: the broadcast state B_p and the
//                     outer-state blob of the changed fragments, actors/fragment_state.hpp), each
//                     placed by messages::Receiver and written straight into its file
//                     (storage::CommitTickets: the store never holds a commit's blobs), then
//                     CommitEnd{version 0, ticket t} -> prepared by a worker of its own (hashed,
//                     synced, staged: CommitTickets::prepare), so that one commit's slow write
//                     holds back neither another commit nor serving -> Persisted{0, ok, reason, t};
//                     then CommitEnd{v, manifest, t} (the manifest lists the "carried" fragments
//                     taken from the newest version) -> recorded as version v -> Persisted{v, ok, reason, t}.
//                     Persisted{0, ok=false, t} from the syncer: it gave t up; what was prepared is dropped.
//                     Without a ticket (0) a chunk is ignored and a CommitEnd refused.
//   learner -> store  Join{heldDigests} (fetch the latest committed version)
//                                                   -> Welcome{v, P, heldFragments, fragmentVersions}
//                     then GlobalFragment* (fp32 B_p, labelled with the version p last changed at) of
//                     every fragment whose digest the requester did not already hold,
//                     or Welcome{accepted=false} when nothing is committed yet
//   syncer  -> store  Restore                        -> the latest version replayed as Persist*
//                     (B_p + outer state of every fragment) and the manifest end marker,
//                     or Persisted{ok=false} when nothing is committed; what tickets an earlier
//                     syncer left under way (chunks, prepared blobs, staged files) is dropped
//   syncer  -> store  (taken_atom), a request after a window of chunks -> an empty answer once taken
//   anyone  -> store  (admin_atom, AdminRequest "status") -> AdminReply
// A version is announced by the syncer only after Persisted{ok}: only committed versions are ever
// served. Runs detached (synced RocksDB writes take milliseconds); the store handle is shared so a
// restarted store actor reuses the open database.
//
// Contract, the local shapes besides the Envelopes above (admin actor and its own worker only):
//   accepts  (pin, v) | (unpin, v) -> (ok, reason); (audit, entry JSON) -> (ok, reason);
//            (audit, count) -> (ok, the newest entries as JSON); (prepared, ticket) from its worker;
//            (taken) -> an empty answer once the chunks sent before it are taken
#pragma once

#include "actors/runtime_options.hpp"

#include <memory>

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

#include "storage/checkpoint_store.hpp"

namespace archipelago::actors {

// `shard`: a learner's fetch is served only the fragments this syncer shard owns.
caf::actor spawn_store_actor(caf::actor_system& system, std::shared_ptr<storage::CheckpointStore> store,
                             ShardOptions shard = {});

}  // namespace archipelago::actors
