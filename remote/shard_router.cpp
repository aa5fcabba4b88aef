#include "remote/shard_router.hpp"

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include <caf/all.hpp>

#include "actors/runtime_options.hpp"
#include "actors/wire.hpp"

namespace archipelago::remote {

using namespace archipelago::actors;  // wire bytes, atoms, registry names and refusals of the actors (actors/)

namespace {

using namespace archipelago::messages;

// A learner's last Join and the shards' answers to it (the syncer router), or its last Fetch and
// the shards' answers (the store router).
struct LearnerTrack {
  caf::actor learner;
  WireBytes request;                // the Join as the learner sent it (syncer)
  std::map<int, Welcome> answers;   // shard -> its accepted Welcome
};

struct RouterState {
  caf::atom_value role;
  int shards = 1;
  std::vector<caf::actor> facades;  // per shard: its session's facade of this role (null: no session)
  std::map<caf::actor_addr, LearnerTrack> learners;
  std::shared_ptr<ShardRouterCounters> counters;
  std::unique_ptr<Outbox> outbox;   // merged Welcomes go out as the role they stand for
  const char* name = "shard_router";
};

using RouterActor = caf::stateful_actor<RouterState>;

int owner_of(const RouterState& st, uint32_t fragment) { return ShardOptions::owner(static_cast<int>(fragment), st.shards); }

void send_to_shard(RouterActor* self, int shard, const caf::actor& learner, WireBytes bytes) {
  const auto& facade = self->state.facades[shard];
  if (facade) caf::send_as(learner, facade, std::move(bytes));
}

void send_to_all(RouterActor* self, const caf::actor& learner, const WireBytes& bytes) {
  for (int k = 0; k < self->state.shards; ++k) send_to_shard(self, k, learner, bytes);
}

// One Welcome from every shard's: each fragment's figures from the shard that owns it.
Welcome merged(const RouterState& st, const std::map<int, Welcome>& answers) {
  Welcome out = answers.begin()->second;
  out.held_fragments.clear();
  for (const auto& [shard, w] : answers) {
    out.version = std::max(out.version, w.version);
    for (uint32_t p : w.held_fragments) {
      if (owner_of(st, p) == shard) out.held_fragments.push_back(p);
    }
  }
  std::sort(out.held_fragments.begin(), out.held_fragments.end());
  auto from_owner = [&](std::vector<uint64_t> Welcome::*field) {
    std::vector<uint64_t> values;
    for (uint32_t p = 0; p < out.fragment_count; ++p) {
      const auto& list = answers.at(owner_of(st, p)).*field;
      values.push_back(p < list.size() ? list[p] : 0);
    }
    return values;
  };
  out.fragment_versions = from_owner(&Welcome::fragment_versions);
  if (!out.received_until.empty()) out.received_until = from_owner(&Welcome::received_until);
  return out;
}

void answer_when_complete(RouterActor* self, LearnerTrack& track) {
  auto& st = self->state;
  if (static_cast<int>(track.answers.size()) < st.shards) return;
  auto bytes = st.outbox->wrap(merged(st, track.answers));
  if (!bytes) return;
  st.counters->welcomes_merged += 1;
  caf::send_as(self, track.learner, std::move(*bytes));
}

void from_learner(RouterActor* self, const caf::actor& learner, WireBytes bytes) {
  auto& st = self->state;
  if (st.role == monitor_name()) {
    send_to_all(self, learner, bytes);
    return;
  }
  auto envelope = unwrap(WireBytes(bytes));
  if (!envelope) {
    send_to_all(self, learner, bytes);  // the shards refuse and count it
    return;
  }
  if (auto* update = std::get_if<FragmentUpdate>(&envelope->body)) {
    const int owner = owner_of(st, update->fragment_id);
    if (st.facades[owner]) {
      st.counters->updates_routed += 1;
      send_to_shard(self, owner, learner, std::move(bytes));
    } else {
      st.counters->updates_dropped += 1;
    }
    return;
  }
  if (std::holds_alternative<Join>(envelope->body) || std::holds_alternative<Fetch>(envelope->body)) {
    auto& track = st.learners[learner.address()];
    track.learner = learner;
    track.answers.clear();
    if (std::holds_alternative<Join>(envelope->body)) track.request = bytes;
    self->monitor(learner);
  }
  send_to_all(self, learner, bytes);
}

void from_shard(RouterActor* self, int shard, const caf::actor& learner, WireBytes bytes) {
  auto& st = self->state;
  if (st.role == monitor_name()) {
    caf::send_as(self, learner, std::move(bytes));
    return;
  }
  auto envelope = unwrap(WireBytes(bytes));
  const Welcome* welcome = envelope ? std::get_if<Welcome>(&envelope->body) : nullptr;
  auto it = st.learners.find(learner.address());
  if (!welcome || !welcome->accepted || it == st.learners.end()) {
    caf::send_as(self, learner, std::move(bytes));  // fragments, refusals: as they came
    return;
  }
  it->second.answers[shard] = *welcome;
  answer_when_complete(self, it->second);
}

caf::behavior router_behavior(RouterActor* self, caf::atom_value role, int shards,
                              std::shared_ptr<ShardRouterCounters> counters) {
  auto& st = self->state;
  st.role = role;
  st.shards = shards;
  st.facades.resize(shards);
  st.counters = std::move(counters);
  st.outbox = std::make_unique<Outbox>(role == store_name() ? "store" : role == syncer_name() ? "syncer" : "monitor");
  self->set_down_handler([=](caf::down_msg& down) { self->state.learners.erase(down.source); });
  // Only this process can name the router (it is registered in the process's own directory, which
  // nothing across the plane reaches): the session watchers and the driver send it shard traffic.
  auto local = [=] {
    auto sender = caf::actor_cast<caf::actor>(self->current_sender());
    return sender && sender->node() == self->node() ? sender : caf::actor{};
  };
  return {
      [=](WireBytes& bytes) {
        if (auto learner = local()) from_learner(self, learner, std::move(bytes));
      },
      [=](shardmsg_atom, int32_t shard, caf::actor& learner, WireBytes& bytes) {
        if (shard < 0 || shard >= self->state.shards || !learner) return;
        from_shard(self, shard, learner, std::move(bytes));
      },
      [=](attach_atom, int32_t shard, caf::actor& facade) {
        auto& st = self->state;
        if (shard < 0 || shard >= st.shards) return;
        st.facades[shard] = facade;
        for (auto& [_, track] : st.learners) {
          track.answers.erase(shard);  // that shard's earlier answer came from a session now gone
          if (facade && !track.request.empty()) {
            // A shard whose session opened after the learner joined: it learns of the learner now.
            st.counters->joins_replayed += 1;
            send_to_shard(self, shard, track.learner, track.request);
          }
        }
      },
  };
}

}  // namespace

caf::actor spawn_shard_router(caf::actor_system& system, caf::atom_value role, int shards,
                              std::shared_ptr<ShardRouterCounters> counters) {
  return system.spawn(router_behavior, role, shards, std::move(counters));
}

}  // namespace archipelago::remote
