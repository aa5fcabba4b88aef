// The names of this process's actors (syncer, store, monitor, learner-3, ...), for this process only.
//
// CAF 0.17's actor registry is reachable from the network: a BASP message with the named-receiver
// flag, or a `remote_lookup`, is delivered to whatever the registry holds under that name, from any
// peer that opened a connection, authenticated or not. Actors are therefore named here instead; no
// peer can address them, and the only actors a remote message can reach are those whose handles
// the process hands out itself (actors/authorization.hpp). A restarted actor is put again under
// the same name. Entries are weak: a dead actor's name resolves to an empty handle. Any thread.
#pragma once

#include <caf/actor.hpp>
#include <caf/atom.hpp>
#include <caf/fwd.hpp>

namespace archipelago::actors {

struct Directory {
  static void put(caf::actor_system& system, caf::atom_value name, const caf::actor& actor);
  static void erase(caf::actor_system& system, caf::atom_value name);
  static caf::actor get(caf::actor_system& system, caf::atom_value name);
};

}  // namespace archipelago::actors
