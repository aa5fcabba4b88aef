#include "remote/admin.hpp"

#include <chrono>
#include <csignal>
#include <functional>

#include <unistd.h>

#include <caf/all.hpp>

#include "actors/accounting.hpp"
#include "actors/authorization.hpp"
#include "actors/directory.hpp"
#include "remote/remote_protocol.hpp"
#include "actors/wire.hpp"
#include "common/log.hpp"
#include "messages/envelope.hpp"

namespace archipelago::remote {

using namespace archipelago::actors;  // wire bytes, atoms, registry names and refusals of the actors (actors/)

namespace {

using namespace archipelago::messages;

// The status of the actor `name`, none while it does not answer (it is being restarted).
template <class T>
std::optional<T> status_of(caf::actor_system& system, caf::atom_value name) {
  auto status = ask_status<T>(system, name, "admin", 5);
  if (!status) return std::nullopt;
  return std::move(*status);
}

// A typed store command of the admin actor: (ok, reason or JSON).
template <class... Ts>
std::pair<bool, std::string> store_call(caf::actor_system& system, Ts&&... message) {
  auto store = Directory::get(system, store_name());
  if (!store) return {false, "the checkpoint store is restarting"};
  caf::scoped_actor self{system};
  std::pair<bool, std::string> result{false, "no answer"};
  self->request(store, std::chrono::seconds(10), std::forward<Ts>(message)...)
      .receive([&](bool ok, std::string& text) { result = {ok, std::move(text)}; },
               [&](caf::error& error) { result = {false, system.render(error)}; });
  return result;
}

nlohmann::json describe(const AdminCommand& command) {
  static const char* kNames[] = {"status", "learners", "nodes", "versions", "pin", "unpin", "audit", "kill_syncer",
                                 "set", "drain", "kill_learner", "kill_node", "restart_learner", "pause", "resume",
                                 "checkpoint", "events", "version_show", "throttle", "corrupt_update"};
  static_assert(sizeof(kNames) / sizeof(kNames[0]) == kLastAdminVerb + 1);
  nlohmann::json j = {{"verb", kNames[static_cast<int>(command.verb)]}};
  if (command.verb == AdminVerb::pin || command.verb == AdminVerb::unpin) j["version"] = command.version;
  if (command.verb == AdminVerb::set) {
    j["key"] = command.key;
    j["value"] = command.value;
  }
  if (command.verb == AdminVerb::throttle) j["value"] = command.value;
  if (!command.target.empty()) j["target"] = command.target;
  return j;
}

// The goodput ledger of this process's run so far (actors/accounting.hpp).
nlohmann::json goodput_now(caf::actor_system& system, const AdminSpec& spec) {
  const auto ids = learner_ids(spec.learner_slots);
  // The syncer before the monitor: merged work never outruns the times.
  const auto syncer = status_of<SyncerStatus>(system, syncer_name()).value_or(SyncerStatus{});
  const auto monitor = status_of<MonitorStatus>(system, monitor_name()).value_or(MonitorStatus{});
  return to_json(ledger_from_status(monotonic_seconds() - spec.started_s + spec.ledger_offset_s, ids, monitor, syncer,
                                    spec.accounting_at_start));
}

// One learner control, or (pause / resume without a target) one per learner slot.
Expected<nlohmann::json> control(const AdminSpec& spec, ControlAction action, const std::string& target,
                                 double factor = 1) {
  if (!spec.control) return make_error(ErrorCode::unavailable, "this run cannot control its learners");
  std::vector<std::string> targets{target};
  if (target.empty() || target == "all") {
    if (action != ControlAction::pause_learner && action != ControlAction::resume_learner) {
      return make_error(ErrorCode::invalid_argument, "name a learner (see learners)");
    }
    targets.clear();
    for (int m = 0; m < spec.learner_slots; ++m) targets.push_back(learner_id(m));
  } else if (action != ControlAction::kill_node &&
             (learner_index(target) < 0 || learner_index(target) >= spec.learner_slots)) {
    return make_error(ErrorCode::invalid_argument, "'" + target + "' is not a learner of this run (learner-0.." +
                                                       learner_id(spec.learner_slots - 1) + ")");
  }
  nlohmann::json done = nlohmann::json::array();
  std::string failed;
  for (const auto& t : targets) {
    auto result = spec.control(LearnerControl{0, action, t, factor});
    if (result) {
      done.push_back(*result);
    } else {
      failed += (failed.empty() ? "" : "; ") + result.error().reason;
    }
  }
  if (done.empty()) return make_error(ErrorCode::unavailable, failed);
  return nlohmann::json{{"sent", done}, {"failed", failed}};
}

// A mutating command: audited (peer, command) before `act` runs, and its result after.
Expected<nlohmann::json> audited(caf::actor_system& system, const AdminSpec& spec, const std::string& peer,
                                 const AdminCommand& command, const std::function<Expected<nlohmann::json>()>& act) {
  nlohmann::json entry = {{"peer", peer}, {"command", describe(command)}, {"phase", "requested"}};
  auto logged = store_call(system, audit_atom::value, entry.dump());
  if (!logged.first) {
    return make_error(ErrorCode::unavailable, "not done: cannot write the audit log: " + logged.second);
  }
  auto result = act();
  if (spec.events) {
    spec.events->add("command", peer, describe(command).dump() + (result ? " ok" : " failed: " + result.error().reason));
  }
  entry["phase"] = "done";
  entry["ok"] = result.ok();
  if (!result) entry["error"] = result.error().reason;
  (void)store_call(system, audit_atom::value, entry.dump());
  return result;
}

Expected<nlohmann::json> execute(caf::actor_system& system, const AdminSpec& spec, const std::string& peer,
                                 const AdminCommand& command) {
  switch (command.verb) {
    case AdminVerb::status: {
      const auto syncer = status_of<SyncerStatus>(system, syncer_name());
      const auto evaluator = status_of<EvaluatorStatus>(system, evaluator_name()).value_or(EvaluatorStatus{});
      const auto monitor = status_of<MonitorStatus>(system, monitor_name()).value_or(MonitorStatus{});
      // Bytes as they crossed this process's node links, or (a local run) the learners' mailboxes.
      LearnerLinkBytes bytes;
      if (spec.stats) {
        const auto traffic = spec.stats->snapshot().total();
        bytes = {static_cast<int64_t>(traffic.bytes_received), static_cast<int64_t>(traffic.bytes_sent)};
      } else {
        bytes = learner_link_bytes(syncer.value_or(SyncerStatus{}),
                                   status_of<StoreStatus>(system, store_name()).value_or(StoreStatus{}));
      }
      const bool scored = evaluator.scored();
      nlohmann::json answer{
          {"run_dir", spec.run_dir},
          {"mode", diloco::mode_name(spec.mode)},
          {"committed_version", syncer ? syncer->version : 0},
          {"phase", syncer ? syncer->phase : ""},
          {"heldout_loss", scored ? evaluator.heldout_loss : std::nullopt},
          // Bits per byte: the loss ÷ (ln 2 × the held-out set's bytes per token), from the evaluator.
          {"heldout_bits_per_byte", scored ? evaluator.heldout_bits_per_byte : std::nullopt},
          {"heldout_version", evaluator.scored_version},
          {"learners_alive", monitor.alive},
          {"bytes_up", bytes.up},
          {"bytes_down", bytes.down},
          {"uptime_s", monotonic_seconds() - spec.started_s},
          {"goodput", goodput_now(system, spec)},
      };
      // The syncer's tunables as they are now, what its updates came in, what it refused, by reason,
      // what screening clipped and refused, and the model version as its fragments' versions, with
      // the fragments whose commit is under way, and which syncer shard this is (null while it restarts).
      const nlohmann::json tunables = syncer ? nlohmann::json(*syncer) : nlohmann::json::object();
      for (const char* key : {"outer_lr", "outer_momentum", "quorum", "inner_steps", "uplink_codec", "downlink_codec",
                              "updates_by_codec", "updates_by_period", "rejected", "screening", "fragment_versions",
                              "fragments_in_flight", "shard"}) {
        answer[key] = tunables.contains(key) ? tunables[key] : nlohmann::json(nullptr);
      }
      return answer;
    }
    case AdminVerb::learners: {
      const auto monitor = status_of<MonitorStatus>(system, monitor_name()).value_or(MonitorStatus{});
      const auto syncer = status_of<SyncerStatus>(system, syncer_name()).value_or(SyncerStatus{});
      auto remote = spec.counters->to_json();
      nlohmann::json rows = nlohmann::json::array();
      for (const auto& [id, r] : monitor.learners) {
        std::string node, site;
        const int index = learner_index(id);
        for (const auto& n : remote["nodes"]) {
          const int first = n.value("first_learner", -1);
          if (index >= first && index < first + n.value("learners", 0)) {
            node = n.value("node", "");
            site = n.value("site", "");
          }
        }
        auto found = syncer.learners.find(id);
        const SyncerLearnerStatus record = found == syncer.learners.end() ? SyncerLearnerStatus{} : found->second;
        auto slot = monitor.slots.find(id);
        rows.push_back({{"id", id}, {"node", node}, {"site", site}, {"state", r.state},
                        {"step", r.step}, {"tokens_per_s", r.tokens_per_s},
                        // staleness of its last merged update (null: none merged yet); restarts: rejoins
                        {"staleness", record.staleness < 0 ? nlohmann::json(nullptr) : nlohmann::json(record.staleness)},
                        // its supervisor's restarts (a rejoin after a syncer restart is not one)
                        {"restarts", slot == monitor.slots.end() ? 0u : slot->second.restarts},
                        {"deaths", r.deaths},  // one per incarnation that died; its cause below
                        {"deaths_by_cause", {{"silence", r.deaths_silence}, {"exit", r.deaths_exit}}},
                        {"suspicions_withdrawn", r.suspicions_withdrawn},
                        {"heartbeat_age_s", r.heartbeat_age_s},
                        {"joins", record.joins}, {"contributions_merged", record.contributions_merged}});
      }
      return nlohmann::json{{"learners", rows}};
    }
    case AdminVerb::nodes: {
      auto remote = spec.counters->to_json();
      return nlohmann::json{{"nodes", remote["nodes"]}, {"learner_slots", remote["learner_slots"]},
                            {"joins_accepted", remote["joins_accepted"]}, {"joins_refused", remote["joins_refused"]},
                            {"refused", remote["refused"]}, {"edge", remote["edge"]}};
    }
    case AdminVerb::versions: {
      auto versions = ask_admin(system, store_name(), "admin", "versions", {}, 10);
      if (!versions) return versions.error();
      const auto store = status_of<StoreStatus>(system, store_name()).value_or(StoreStatus{});
      return nlohmann::json{{"versions", (*versions)["versions"]}, {"latest", store.latest_version}};
    }
    case AdminVerb::pin:
    case AdminVerb::unpin:
      return audited(system, spec, peer, command, [&]() -> Expected<nlohmann::json> {
        const bool pin = command.verb == AdminVerb::pin;
        auto done = pin ? store_call(system, pin_atom::value, command.version)
                        : store_call(system, unpin_atom::value, command.version);
        if (!done.first) return make_error(ErrorCode::invalid_argument, done.second);
        return nlohmann::json{{"version", command.version}, {"pinned", pin}};
      });
    case AdminVerb::kill_syncer:
      return audited(system, spec, peer, command, [&]() -> Expected<nlohmann::json> {
        auto syncer = Directory::get(system, syncer_name());
        if (!syncer) return make_error(ErrorCode::unavailable, "no syncer is running (it is being restarted)");
        const uint64_t version = status_of<SyncerStatus>(system, syncer_name()).value_or(SyncerStatus{}).version;
        caf::anon_send_exit(syncer, caf::exit_reason::kill);  // as abrupt as a crash: no handler runs
        return nlohmann::json{{"killed", "syncer"}, {"version_at_kill", version}};
      });
    case AdminVerb::set:
      return audited(system, spec, peer, command, [&]() -> Expected<nlohmann::json> {
        auto syncer = Directory::get(system, syncer_name());
        if (!syncer) return make_error(ErrorCode::unavailable, "no syncer is running (it is being restarted)");
        caf::scoped_actor self{system};
        Expected<nlohmann::json> result = make_error(ErrorCode::unavailable, "no answer from the syncer");
        self->request(syncer, std::chrono::seconds(10), tune_atom::value, command.key, command.value)
            .receive(
                [&](bool ok, std::string& old_or_reason, std::string& now) {
                  result = ok ? Expected<nlohmann::json>(nlohmann::json{
                                    {"key", command.key}, {"old", old_or_reason}, {"new", now}})
                              : Expected<nlohmann::json>(make_error(ErrorCode::invalid_argument, old_or_reason));
                },
                [&](caf::error& error) { result = make_error(ErrorCode::unavailable, system.render(error)); });
        return result;
      });
    case AdminVerb::drain:
      return audited(system, spec, peer, command, [&]() -> Expected<nlohmann::json> {
        spec.counters->drain_requested = true;
        if (spec.drain) spec.drain();
        return nlohmann::json{{"draining", true}};
      });
    case AdminVerb::kill_learner:
    case AdminVerb::kill_node:
    case AdminVerb::restart_learner:
    case AdminVerb::pause:
    case AdminVerb::resume:
      return audited(system, spec, peer, command, [&]() -> Expected<nlohmann::json> {
        return control(spec, *control_action_of(command.verb), command.target);
      });
    case AdminVerb::throttle:
      return audited(system, spec, peer, command, [&]() -> Expected<nlohmann::json> {
        char* end = nullptr;
        const double factor = std::strtod(command.value.c_str(), &end);
        if (command.value.empty() || *end != '\0' || !(factor >= 1 && factor <= kMaxThrottle)) {
          return make_error(ErrorCode::invalid_argument,
                            "throttle takes a factor from 1 (full speed) to 100, not '" + command.value + "'");
        }
        return control(spec, *control_action_of(command.verb), command.target, factor);
      });
    case AdminVerb::corrupt_update:
      return audited(system, spec, peer, command, [&]() -> Expected<nlohmann::json> {
        return control(spec, *control_action_of(command.verb), command.target);
      });
    case AdminVerb::checkpoint:
      return audited(system, spec, peer, command, [&]() -> Expected<nlohmann::json> {
        auto syncer = Directory::get(system, syncer_name());
        if (!syncer) return make_error(ErrorCode::unavailable, "no syncer is running (it is being restarted)");
        caf::scoped_actor self{system};
        Expected<nlohmann::json> result = make_error(ErrorCode::unavailable, "no answer from the syncer");
        self->request(syncer, std::chrono::seconds(10), checkpoint_atom::value)
            .receive(
                [&](bool ok, std::string& what, uint64_t version) {
                  result = ok ? Expected<nlohmann::json>(nlohmann::json{{"version", version}, {"state", what}})
                              : Expected<nlohmann::json>(make_error(ErrorCode::conflict, what));
                },
                [&](caf::error& error) { result = make_error(ErrorCode::unavailable, system.render(error)); });
        return result;
      });
    case AdminVerb::events: {
      if (!spec.events) return make_error(ErrorCode::unavailable, "this run keeps no events");
      return nlohmann::json{{"events", spec.events->recent(command.count == 0 ? 20 : command.count)},
                            {"total", spec.events->total()}};
    }
    case AdminVerb::version_show: {
      auto version = ask_admin(system, store_name(), "admin", "version", {std::to_string(command.version)}, 10);
      if (!version) return version.error();
      return *version;
    }
    case AdminVerb::audit: {
      const uint32_t count = command.count == 0 ? 20 : command.count;
      auto read = store_call(system, audit_atom::value, count);
      if (!read.first) return make_error(ErrorCode::unavailable, "cannot read the audit log: " + read.second);
      auto entries = nlohmann::json::parse(read.second, nullptr, false);
      if (entries.is_discarded()) return make_error(ErrorCode::corrupt, "the audit log answer is not JSON");
      return nlohmann::json{{"audit", entries}};
    }
  }
  return make_error(ErrorCode::invalid_argument, "unknown admin verb");
}

struct AdminState {
  AdminSpec spec;
  Outbox outbox{"admin"};
  std::shared_ptr<spdlog::logger> log = component_logger("admin");
  const char* name = "admin";
};

using AdminActor = caf::stateful_actor<AdminState>;

caf::behavior admin_behavior(AdminActor* self, AdminSpec spec) {
  self->state.spec = std::move(spec);
  refuse_unmatched(self, "admin", refusals_of(self->state.spec.counters), self->state.log);
  return {
      [=](admin_atom, const std::string& key, WireBytes& bytes) -> caf::result<WireBytes> {
        auto& st = self->state;
        const std::string peer = st.spec.sessions->peer_of(key);
        if (peer.empty()) {
          st.spec.counters->refusals.refuse("admin", "admin_command", Refusal::wrong_key, *st.log);
          return caf::sec::request_receiver_down;
        }
        auto envelope = unwrap(std::move(bytes));
        const AdminCommand* command = envelope ? std::get_if<AdminCommand>(&envelope->body) : nullptr;
        if (!command) {
          st.spec.counters->refusals.refuse("admin", envelope ? message_name(envelope->body) : "admin", Refusal::malformed,
                                            *st.log, envelope ? "not an admin command" : envelope.error().to_string());
          auto reply = st.outbox.wrap(AdminReply{0, false, "not an admin command", ""});
          return reply ? std::move(*reply) : WireBytes{};
        }
        auto answer = execute(self->system(), st.spec, peer, *command);
        auto reply = st.outbox.wrap(answer ? AdminReply{command->request_id, true, "ok", answer->dump()}
                                           : AdminReply{command->request_id, false, answer.error().reason, ""});
        return reply ? std::move(*reply) : WireBytes{};
      },
  };
}

}  // namespace

void AdminSessions::add(const std::string& key, const std::string& peer) {
  std::lock_guard lock(mutex_);
  peers_[key] = peer;
}

std::string AdminSessions::peer_of(const std::string& key) const {
  std::lock_guard lock(mutex_);
  std::string found;
  for (const auto& [k, peer] : peers_) {
    if (keys_equal(k, key)) found = peer;  // no early exit on a match
  }
  return found;
}

Expected<nlohmann::json> apply_learner_control(caf::actor_system& system, const LearnerControl& control) {
  auto log = component_logger("admin");
  if (control.action == ControlAction::corrupt_update && !drill_hooks()) {
    log->warn("refused corrupt_update of {}: drill hooks are off in this process", control.learner_id);
    return make_error(ErrorCode::unavailable,
                      "drill hooks are off here: only a node started with --drill-hooks corrupts updates");
  }
  if (control.action == ControlAction::kill_node) {
    log->warn("killed by an operator (kill node): SIGKILL");
    ::kill(::getpid(), SIGKILL);  // as abrupt as a crash: nothing below runs
    return make_error(ErrorCode::unavailable, "still alive after SIGKILL");
  }
  const int index = learner_index(control.learner_id);
  auto learner = index >= 0 ? Directory::get(system, learner_name(index)) : caf::actor{};
  if (!learner) return make_error(ErrorCode::not_found, "'" + control.learner_id + "' is not running here (restarting?)");
  switch (control.action) {
    case ControlAction::kill_learner:
      caf::anon_send_exit(learner, caf::exit_reason::kill);  // no handler runs: its supervisor sees a crash
      break;
    case ControlAction::restart_learner:
      caf::anon_send(learner, restart_atom::value, process_key());
      break;
    case ControlAction::pause_learner:
    case ControlAction::resume_learner:
      caf::anon_send(learner, pause_atom::value, process_key(), control.action == ControlAction::pause_learner);
      break;
    case ControlAction::throttle_learner:
      caf::anon_send(learner, throttle_atom::value, process_key(), control.factor);
      break;
    case ControlAction::corrupt_update:
      caf::anon_send(learner, corrupt_atom::value, process_key());
      break;
    case ControlAction::kill_node:
      break;
  }
  log->info("{}: {} (operator)", control.learner_id,
            control.action == ControlAction::kill_learner      ? std::string("killed")
            : control.action == ControlAction::restart_learner ? std::string("restarting")
            : control.action == ControlAction::pause_learner   ? std::string("pausing")
            : control.action == ControlAction::resume_learner  ? std::string("resuming")
            : control.action == ControlAction::throttle_learner
                ? "throttled to 1/" + std::to_string(control.factor) + " speed"
                : std::string("its next update will be corrupted (drill hook)"));
  return nlohmann::json{{"learner", control.learner_id}};
}

caf::actor spawn_admin(caf::actor_system& system, AdminSpec spec) {
  return system.spawn<caf::detached>(admin_behavior, std::move(spec));
}

std::optional<ControlAction> control_action_of(AdminVerb verb) {
  switch (verb) {
    case AdminVerb::kill_learner: return ControlAction::kill_learner;
    case AdminVerb::kill_node: return ControlAction::kill_node;
    case AdminVerb::restart_learner: return ControlAction::restart_learner;
    case AdminVerb::pause: return ControlAction::pause_learner;
    case AdminVerb::resume: return ControlAction::resume_learner;
    case AdminVerb::throttle: return ControlAction::throttle_learner;
    case AdminVerb::corrupt_update: return ControlAction::corrupt_update;
    default: return std::nullopt;
  }
}

}  // namespace archipelago::remote
