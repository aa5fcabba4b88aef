#include "remote/gateway.hpp"
#include "actors/directory.hpp"

#include <algorithm>
#include <deque>
#include <set>
#include <tuple>
#include <vector>

#include <caf/all.hpp>

#include "remote/admin.hpp"
#include "remote/remote_protocol.hpp"
#include "remote/shaped_link.hpp"
#include "actors/wire.hpp"
#include "common/log.hpp"
#include "messages/envelope.hpp"
#include "net/names.hpp"

namespace archipelago::remote {

using namespace archipelago::actors;  // wire bytes, atoms, registry names and refusals of the actors (actors/)

namespace {

using namespace archipelago::messages;

// Decodes `bytes` in place for a look at the header; the result must not outlive the call's use.
Expected<DecodedEnvelope> peek(const WireBytes& bytes) {
  DecodeLimits limits;
  limits.check_finite = false;  // the role actor checks payloads; this is routing only
  std::shared_ptr<const void> borrowed(std::shared_ptr<const void>{}, bytes.data());
  return decode(ByteView{reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), borrowed}, limits);
}

bool is_role(caf::atom_value role) {
  return role == syncer_name() || role == store_name() || role == monitor_name();
}

// ---- downlink: one per learner incarnation and role ----------------------------------------------

struct DownlinkSpec {
  std::string key;  // the session's
  caf::atom_value role;
  caf::actor learner;
  caf::actor watcher;
  std::string node, site;
  std::shared_ptr<ShapedLink> link;
  std::shared_ptr<net::LinkStats> stats;
  std::shared_ptr<RemoteCounters> counters;
};

caf::behavior downlink_behavior(caf::event_based_actor* self, DownlinkSpec spec) {
  self->monitor(spec.learner);
  // The learner is gone (its process died, or it finished): so is its downlink, for the same reason.
  self->set_down_handler([=](caf::down_msg& down) { self->quit(down.reason); });
  return {
      [=](WireBytes& bytes) {
        const bool fragment_start = [&] {
          auto envelope = peek(bytes);
          if (!envelope) return false;
          auto* global = std::get_if<GlobalFragment>(&envelope->body);
          return global && global->chunk.chunk_index == 0;
        }();
        {
          std::lock_guard lock(spec.counters->mutex);
          auto& tally = spec.counters->tallies[spec.node];
          tally.messages_sent += 1;
          tally.global_fragments_sent += fragment_start ? 1 : 0;
        }
        auto watcher = spec.watcher;
        auto key = spec.key;
        auto role = spec.role;
        auto learner = spec.learner;
        auto stats = spec.stats;
        auto node = spec.node;
        auto site = spec.site;
        // Counted when the link releases the bytes onto the transport, as the far side counts them.
        spec.link->send(std::move(bytes), [watcher, key, role, learner, stats, node, site](WireBytes&& b) {
          stats->record_sent(node, site, b.size());
          caf::anon_send(watcher, deliver_atom::value, key, role, learner, std::move(b));
        });
      },
  };
}

// ---- link: one per admitted node session -----------------------------------------------------------

struct LinkSpec {
  std::string key;  // the session key, handed to the node with the join answer
  std::string node, site;
  int first = 0, count = 0;
  caf::actor watcher;
  net::LinkSpec downlink;
  std::shared_ptr<net::LinkStats> stats;
  std::shared_ptr<RemoteCounters> counters;
};

struct LinkState {
  LinkSpec spec;
  std::shared_ptr<ShapedLink> downlink;
  std::map<std::pair<caf::atom_value, caf::actor_addr>, caf::actor> downlinks;
  std::shared_ptr<std::vector<caf::actor>> live = std::make_shared<std::vector<caf::actor>>();
  int64_t foreign = 0;
  std::shared_ptr<spdlog::logger> log = component_logger("gateway");
  const char* name = "node_link";
};

using LinkActor = caf::stateful_actor<LinkState>;

void on_up(LinkActor* self, caf::atom_value role, const caf::actor& learner, WireBytes&& bytes) {
  auto& st = self->state;
  const auto size = bytes.size();
  st.spec.stats->record_received(st.spec.node, st.spec.site, size);
  auto envelope = peek(bytes);
  auto& refusals = st.spec.counters->refusals;
  const std::string actor = "link of node '" + st.spec.node + "'";
  if (!envelope || !is_role(role) || !learner) {
    refusals.refuse(actor, envelope ? message_name(envelope->body) : "up", Refusal::malformed, *st.log,
                    envelope ? "unknown role or sender" : envelope.error().to_string());
    return;
  }
  if (!node_may_send(role, envelope->body)) {
    // A node speaks for its learners only: never Persist, AdminRequest, GlobalFragment, ...
    refusals.refuse(actor, std::string(message_name(envelope->body)) + " to " + caf::to_string(role),
                    Refusal::kind_not_allowed, *st.log, "a node's learners do not send that to that actor");
    return;
  }
  const int index = learner_index(envelope->sender_id);
  // Canonical ids only ("learner-1", not "learner-01"), of the slot range this session was admitted with.
  if (index < st.spec.first || index >= st.spec.first + st.spec.count || learner_id(index) != envelope->sender_id) {
    // Only learners of the slot range this session was admitted with may speak through it.
    st.spec.counters->rejected_foreign += 1;
    refusals.refuse(actor, message_name(envelope->body), Refusal::foreign_learner, *st.log,
                    "'" + envelope->sender_id + "' is not a learner of this node");
    if (st.foreign++ < 5) {
      st.log->warn("node {}: rejected a {} from '{}': not a learner admitted for this node (slots {}..{})",
                   st.spec.node, message_name(envelope->body), envelope->sender_id, st.spec.first,
                   st.spec.first + st.spec.count - 1);
    }
    return;
  }
  {
    std::lock_guard lock(st.spec.counters->mutex);
    auto& tally = st.spec.counters->tallies[st.spec.node];
    tally.messages_received += 1;
    if (auto* update = std::get_if<FragmentUpdate>(&envelope->body); update && update->chunk.chunk_index == 0) {
      tally.updates_received += 1;
    }
    if (std::holds_alternative<Join>(envelope->body) && role == syncer_name()) {
      st.spec.counters->learners_joined.insert(envelope->sender_id);
    }
  }
  auto key = std::make_pair(role, learner.address());
  auto it = st.downlinks.find(key);
  if (it == st.downlinks.end()) {
    auto downlink = self->spawn(downlink_behavior, DownlinkSpec{st.spec.key, role, learner, st.spec.watcher, st.spec.node,
                                                                st.spec.site, st.downlink, st.spec.stats,
                                                                st.spec.counters});
    it = st.downlinks.emplace(key, downlink).first;
    st.live->push_back(downlink);
    self->monitor(downlink);  // dropped from both when it ends with its learner incarnation
  }
  auto target = Directory::get(self->system(), role);
  if (!target) return;  // restarting (root supervisor): the learner retries
  caf::send_as(it->second, target, std::move(bytes));
}

caf::behavior link_behavior(LinkActor* self, LinkSpec spec) {
  auto& st = self->state;
  st.spec = std::move(spec);
  st.downlink = std::make_shared<ShapedLink>(st.spec.downlink);
  self->monitor(st.spec.watcher);
  auto live = st.live;
  auto downlink = st.downlink;
  self->attach_functor([live, downlink](const caf::error& reason) {
    downlink->stop();
    // Downlinks end with the session, abnormally: the monitor declares the node's learners dead.
    for (auto& d : *live) caf::anon_send_exit(d, caf::exit_reason::remote_link_unreachable);
  });
  self->set_down_handler([=](caf::down_msg& down) {
    auto& st = self->state;
    if (down.source != st.spec.watcher.address()) {
      // A downlink ended with its learner: forget it, so a long session's maps stay its live learners'.
      for (auto it = st.downlinks.begin(); it != st.downlinks.end(); ++it) {
        if (it->second.address() == down.source) {
          st.downlinks.erase(it);
          break;
        }
      }
      auto& live = *st.live;
      live.erase(std::remove_if(live.begin(), live.end(), [&](const caf::actor& d) { return d.address() == down.source; }),
                 live.end());
      return;
    }
    st.log->warn("node {} (site {}) is gone: {}", st.spec.node, st.spec.site, self->system().render(down.reason));
    self->quit(down.reason ? down.reason : caf::error{caf::exit_reason::remote_link_unreachable});
  });
  refuse_unmatched(self, "link of node '" + st.spec.node + "'", refusals_of(st.spec.counters), st.log);
  return {
      [=](up_atom, std::string& key, caf::atom_value role, caf::actor& learner, WireBytes& bytes) {
        auto& st = self->state;
        if (!keys_equal(key, st.spec.key)) {
          st.spec.counters->refusals.refuse("link of node '" + st.spec.node + "'", "up", Refusal::wrong_key, *st.log);
          return;
        }
        on_up(self, role, learner, std::move(bytes));
      },
      [=](stop_atom, std::string& key) {
        auto& st = self->state;
        if (!keys_equal(key, process_key())) {
          st.spec.counters->refusals.refuse("link of node '" + st.spec.node + "'", "stop", Refusal::wrong_key, *st.log);
          return;
        }
        caf::anon_send(st.spec.watcher, stop_atom::value, st.spec.key);
      },
      [=](control_atom, std::string& key, WireBytes& bytes) {
        // An operator's learner control (admin actor -> gateway -> here): to the node, with its session key.
        auto& st = self->state;
        if (!keys_equal(key, process_key())) {
          st.spec.counters->refusals.refuse("link of node '" + st.spec.node + "'", "control", Refusal::wrong_key, *st.log);
          return;
        }
        st.spec.stats->record_sent(st.spec.node, st.spec.site, bytes.size());
        caf::anon_send(st.spec.watcher, control_atom::value, st.spec.key, std::move(bytes));
      },
  };
}

// ---- gateway ---------------------------------------------------------------------------------------

using JoinReply = std::tuple<WireBytes, std::string, std::string, std::string, int32_t, caf::actor, std::string>;

struct Session {
  std::string node, site;
  int first = 0, count = 0;
};

struct GatewayState {
  GatewaySpec spec;
  std::vector<bool> taken;                       // per learner slot
  // Per learner slot: the node whose session ended holding it, and until when it is held for that
  // node (spec.slot_grace_s): another node cannot take it before then ("" or a past time: free).
  std::vector<std::string> held_for;
  std::vector<std::chrono::steady_clock::time_point> held_until;
  std::map<caf::actor_addr, Session> sessions;   // link -> what it holds
  std::vector<caf::actor> links;
  std::shared_ptr<std::vector<caf::actor>> all_links;  // ended with the gateway
  // node name -> first slot it held, for a node that comes back; the kRememberedNodes most recent.
  std::map<std::string, int> last_first;
  std::deque<std::string> joined_order;          // last_first's names, least recently joined first
  std::set<std::string> bad_name_logged;         // refusals already logged: bad-name reasons, certificates
  Outbox outbox{"gateway"};
  std::shared_ptr<spdlog::logger> log = component_logger("gateway");
  const char* name = "gateway";
};

using GatewayActor = caf::stateful_actor<GatewayState>;

// How many node names the gateway remembers a range for (a node that comes back after its session
// ended gets its range again): a bound, so that names made up join after join cannot grow it.
constexpr size_t kRememberedNodes = 1024;

void remember_range(GatewayState& st, const std::string& node, int first) {
  if (st.last_first.count(node)) {
    st.joined_order.erase(std::find(st.joined_order.begin(), st.joined_order.end(), node));
  }
  st.last_first[node] = first;
  st.joined_order.push_back(node);
  while (st.joined_order.size() > kRememberedNodes) {
    st.last_first.erase(st.joined_order.front());
    st.joined_order.pop_front();
  }
}

// The admitted sessions, for the coordinator's status (RemoteCounters::nodes).
void publish_sessions(GatewayActor* self) {
  auto& st = self->state;
  nlohmann::json nodes = nlohmann::json::array();
  for (const auto& [addr, s] : st.sessions) {
    nodes.push_back({{"node", s.node}, {"site", s.site}, {"first_learner", s.first}, {"learners", s.count}});
  }
  std::lock_guard lock(st.spec.counters->mutex);
  st.spec.counters->nodes = std::move(nodes);
  st.spec.counters->learner_slots = static_cast<int>(st.taken.size());
}

JoinReply refuse(GatewayActor* self, JoinRefusal code, const std::string& reason) {
  Welcome welcome{0, 0, false, reason};
  welcome.refusal = code;
  auto bytes = self->state.outbox.wrap(welcome);
  return JoinReply{bytes ? std::move(*bytes) : WireBytes{}, "", "", "", -1, caf::actor{}, ""};
}

JoinReply on_node_join(GatewayActor* self, WireBytes&& bytes, int32_t learners, int32_t preferred,
                       const caf::actor& watcher, const std::string& identity) {
  auto& st = self->state;
  auto envelope = unwrap(std::move(bytes));
  const Join* join = envelope ? std::get_if<Join>(&envelope->body) : nullptr;
  if (!join || !watcher) {
    st.spec.counters->joins_refused_other += 1;
    st.log->warn("refused a node: malformed join request");
    return refuse(self, JoinRefusal::bad_request, "malformed join request");
  }
  // Names are data: a node, site or device name outside the alphabet is refused before it reaches a
  // log, a map or a label (net/names.hpp); the reason names the field, never the name.
  for (const Status& checked : {net::check_peer_name(join->node, "the node name"),
                                net::check_peer_name(join->site, "the site name"), net::check_device_name(join->device)}) {
    if (checked.ok()) continue;
    st.spec.counters->joins_refused_bad_name += 1;
    if (st.bad_name_logged.size() < 1024 && st.bad_name_logged.insert(checked.error().reason).second) {  // once, then counted
      st.log->warn("refused a node: {} (counted as joins_refused.bad_name)", checked.error().reason);
    }
    return refuse(self, JoinRefusal::bad_request, checked.error().reason);
  }
  // Under TLS a node is its certificate: it joins under that name only, so the range remembered for
  // a name (and its site's link shaping) belongs to whoever holds that certificate.
  if (!identity.empty() && join->node != identity) {
    st.spec.counters->joins_refused_identity += 1;
    if (st.bad_name_logged.size() < 1024 && st.bad_name_logged.insert("identity " + identity).second) {
      st.log->warn("refused node '{}': its certificate names '{}' (counted as joins_refused.identity; logged once per "
                   "certificate)", join->node, identity);
    }
    return refuse(self, JoinRefusal::bad_request,
                  "under TLS a node joins under its certificate's name ('" + identity + "'), not '" + join->node + "'");
  }
  if (!st.spec.secret || st.taken.empty()) {
    // A local run's console endpoint: the same gateway, with no learner slots for nodes.
    st.spec.counters->joins_refused_other += 1;
    st.log->warn("refused node '{}': this run takes no nodes", join->node);
    return refuse(self, JoinRefusal::no_free_slots, "this run takes no nodes (a local run: archipelago train)");
  }
  const int total = static_cast<int>(st.taken.size());
  if (learners < 1 || learners > total) {
    st.spec.counters->joins_refused_other += 1;
    return refuse(self, JoinRefusal::bad_request, "a node must host 1.." + std::to_string(total) + " learners (train.learners = " +
                            std::to_string(total) + "), not " + std::to_string(learners));
  }
  const auto now = std::chrono::steady_clock::now();
  auto held_for_another = [&](int i) { return !st.held_for[i].empty() && st.held_for[i] != join->node && now < st.held_until[i]; };
  auto range_free = [&](int first) {
    if (first < 0 || first + learners > total) return false;
    for (int i = first; i < first + learners; ++i) {
      if (st.taken[i] || held_for_another(i)) return false;
    }
    return true;
  };
  int first = -1;
  if (range_free(preferred)) {
    first = preferred;  // a node that already runs learners keeps their slots
  } else if (auto it = st.last_first.find(join->node); it != st.last_first.end() && range_free(it->second)) {
    first = it->second;
  } else {
    for (int f = 0; f + learners <= total && first < 0; ++f) {
      if (range_free(f)) first = f;
    }
  }
  if (first < 0) {
    st.spec.counters->joins_refused_other += 1;
    int used = 0, held = 0;
    for (int i = 0; i < total; ++i) {
      used += st.taken[i];
      held += !st.taken[i] && held_for_another(i);
    }
    st.log->warn("refused node '{}': no {} free learner slots ({} of {} in use, {} held for nodes that dropped)", join->node,
                 learners, used, total, held);
    return refuse(self, JoinRefusal::no_free_slots, "no " + std::to_string(learners) + " free learner slots (train.learners = " +
                            std::to_string(total) + ", " + std::to_string(used) + " in use, " + std::to_string(held) +
                            " held for nodes that dropped: net.slot_grace_s)");
  }
  const auto downlink = st.spec.topology ? st.spec.topology->link(st.spec.site, join->site) : net::LinkSpec{};
  std::string key = random_key();
  auto link = self->spawn(link_behavior, LinkSpec{key, join->node, join->site, first, learners, watcher, downlink,
                                                  st.spec.stats, st.spec.counters});
  self->monitor(link);
  for (int i = first; i < first + learners; ++i) {
    st.taken[i] = true;
    st.held_for[i].clear();
  }
  st.sessions[link.address()] = Session{join->node, join->site, first, learners};
  st.links.push_back(link);
  st.all_links->push_back(link);
  remember_range(st, join->node, first);
  publish_sessions(self);
  st.spec.counters->joins_accepted += 1;
  st.log->info("admitted node '{}' (site {}, device {}) with learners {}..{}", join->node, join->site, join->device,
               first, first + learners - 1);
  auto welcome = st.outbox.wrap(Welcome{0, 0, true, ""});
  return JoinReply{welcome ? std::move(*welcome) : WireBytes{}, st.spec.config_toml, st.spec.topology_toml,
                   st.spec.site, first, link, std::move(key)};
}

caf::behavior gateway_behavior(GatewayActor* self, GatewaySpec spec) {
  auto& st = self->state;
  st.spec = std::move(spec);
  st.taken.assign(st.spec.learner_slots, false);
  st.held_for.assign(st.spec.learner_slots, "");
  st.held_until.assign(st.spec.learner_slots, std::chrono::steady_clock::time_point{});
  auto links = std::make_shared<std::vector<caf::actor>>();
  self->attach_functor([=](const caf::error&) {
    for (auto& link : *links) caf::anon_send_exit(link, caf::exit_reason::user_shutdown);
  });
  st.all_links = links;
  self->set_down_handler([=](caf::down_msg& down) {
    auto& st = self->state;
    auto it = st.sessions.find(down.source);
    if (it == st.sessions.end()) return;
    const auto until = std::chrono::steady_clock::now() +
                       std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                           std::chrono::duration<double>(st.spec.slot_grace_s));
    for (int i = it->second.first; i < it->second.first + it->second.count; ++i) {
      st.taken[i] = false;
      st.held_for[i] = st.spec.slot_grace_s > 0 ? it->second.node : "";  // held for it: a frozen node comes back to its own
      st.held_until[i] = until;
    }
    st.log->info("node '{}' released learners {}..{} (held for it for {} s: net.slot_grace_s)", it->second.node,
                 it->second.first, it->second.first + it->second.count - 1, st.spec.slot_grace_s);
    st.sessions.erase(it);
    publish_sessions(self);
    // Both lists forget the link: a handle kept holds the ended actor's control block (~80 bytes a session).
    auto ended = [&](const caf::actor& l) { return l.address() == down.source; };
    st.links.erase(std::remove_if(st.links.begin(), st.links.end(), ended), st.links.end());
    st.all_links->erase(std::remove_if(st.all_links->begin(), st.all_links->end(), ended), st.all_links->end());
  });
  publish_sessions(self);
  refuse_unmatched(self, "gateway", refusals_of(st.spec.counters), st.log);
  return {
      [=](nodejoin_atom, const std::string& local, WireBytes& bytes, int32_t learners, int32_t preferred,
          caf::actor& sink, const std::string& identity) -> JoinReply {
        // From this process's plane, which checked the node's proof of the join token.
        if (!keys_equal(local, process_key())) {
          self->state.spec.counters->refusals.refuse("gateway", "nodejoin", Refusal::wrong_key, *self->state.log);
          return refuse(self, JoinRefusal::unauthenticated, "refused");
        }
        return on_node_join(self, std::move(bytes), learners, preferred, sink, identity);
      },
      [=](adminjoin_atom, const std::string& local,
          const std::string& peer) -> std::tuple<bool, std::string, std::string, caf::actor> {
        // From this process's plane, which checked the console's proof of the admin token.
        auto& st = self->state;
        if (!keys_equal(local, process_key())) {
          st.spec.counters->refusals.refuse("gateway", "adminjoin", Refusal::wrong_key, *st.log);
          return {false, "refused", "", caf::actor{}};
        }
        if (!st.spec.admin_secret || !st.spec.admin || !st.spec.admin_sessions) {
          st.spec.counters->admin_sessions_refused += 1;
          st.log->warn("refused an admin session: this coordinator has no admin token (--admin-token-file)");
          return {false, "this coordinator has no admin token (--admin-token-file)", "", caf::actor{}};
        }
        std::string key = random_key();
        st.spec.admin_sessions->add(key, peer);
        st.spec.counters->admin_sessions_accepted += 1;
        st.log->info("opened an admin session for {}", peer);
        return {true, "", key, st.spec.admin};
      },
      [=](stop_atom, std::string& key) {
        auto& st = self->state;
        if (!keys_equal(key, process_key())) {
          st.spec.counters->refusals.refuse("gateway", "stop", Refusal::wrong_key, *st.log);
          return;
        }
        for (auto& link : st.links) self->send(link, stop_atom::value, process_key());
      },
      [=](control_atom, std::string& key, WireBytes& bytes) -> std::tuple<bool, std::string> {
        // From the admin actor (this process): the node holding the learner (or named) gets it.
        auto& st = self->state;
        if (!keys_equal(key, process_key())) {
          st.spec.counters->refusals.refuse("gateway", "control", Refusal::wrong_key, *st.log);
          return {false, "refused"};
        }
        auto envelope = peek(bytes);
        const auto* control = envelope ? std::get_if<LearnerControl>(&envelope->body) : nullptr;
        if (!control) return {false, "not a learner control"};
        const bool node_target = control->action == ControlAction::kill_node;
        const int index = learner_index(control->learner_id);
        for (size_t i = 0; i < st.links.size(); ++i) {
          const auto it = st.sessions.find(st.links[i].address());
          if (it == st.sessions.end()) continue;
          const auto& s = it->second;
          if (node_target ? s.node == control->learner_id : index >= s.first && index < s.first + s.count) {
            self->send(st.links[i], control_atom::value, process_key(), std::move(bytes));
            return {true, s.node};
          }
        }
        return {false, node_target ? "no node '" + control->learner_id + "' is connected (see nodes)"
                                   : "no connected node runs '" + control->learner_id + "' (see learners)"};
      },
  };
}

}  // namespace

nlohmann::json RemoteCounters::to_json() {
  std::lock_guard lock(mutex);
  nlohmann::json links = nlohmann::json::object();
  for (const auto& [node, t] : tallies) {
    links[node] = {{"updates_received", t.updates_received}, {"global_fragments_sent", t.global_fragments_sent},
                   {"messages_received", t.messages_received}, {"messages_sent", t.messages_sent}};
  }
  return {{"joins_accepted", joins_accepted.load()},
          {"joins_refused", {{"wrong_token", joins_refused_wrong_token.load()},
                             {"missing_token", joins_refused_missing_token.load()},
                             {"bad_name", joins_refused_bad_name.load()},
                             {"identity", joins_refused_identity.load()},
                             {"other", joins_refused_other.load()}}},
          {"rejected_foreign", rejected_foreign.load()},
          {"refused", refusals.to_json()},
          {"admin_sessions", {{"accepted", admin_sessions_accepted.load()}, {"refused", admin_sessions_refused.load()}}},
          {"nodes", nodes},
          {"learner_slots", learner_slots},
          {"learners_seen", learners_joined.size()},
          {"link_messages", links},
          {"edge", edge ? edge->to_json() : nlohmann::json::object()}};
}

caf::actor spawn_gateway(caf::actor_system& system, GatewaySpec spec) {
  return system.spawn(gateway_behavior, std::move(spec));
}

}  // namespace archipelago::remote
