#include "actors/directory.hpp"

#include <map>
#include <mutex>

#include <caf/actor_cast.hpp>
#include <caf/actor_system.hpp>
#include <caf/weak_intrusive_ptr.hpp>

namespace archipelago::actors {
namespace {

std::mutex mutex;
// Keyed by the system's address; entries of a destroyed system only hold dead weak pointers.
std::map<const caf::actor_system*, std::map<caf::atom_value, caf::weak_actor_ptr>>& names() {
  static std::map<const caf::actor_system*, std::map<caf::atom_value, caf::weak_actor_ptr>> table;
  return table;
}

}  // namespace

void Directory::put(caf::actor_system& system, caf::atom_value name, const caf::actor& actor) {
  std::lock_guard lock(mutex);
  names()[&system][name] = caf::actor_cast<caf::weak_actor_ptr>(actor);
}

void Directory::erase(caf::actor_system& system, caf::atom_value name) {
  std::lock_guard lock(mutex);
  auto it = names().find(&system);
  if (it != names().end()) it->second.erase(name);
}

caf::actor Directory::get(caf::actor_system& system, caf::atom_value name) {
  std::lock_guard lock(mutex);
  auto it = names().find(&system);
  if (it == names().end()) return {};
  auto entry = it->second.find(name);
  if (entry == it->second.end()) return {};
  return caf::actor_cast<caf::actor>(entry->second.lock());
}

}  // namespace archipelago::actors
