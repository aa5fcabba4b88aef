#include "actors/evaluator.hpp"
#include "actors/directory.hpp"

#include <chrono>
#include <cmath>

#include <caf/all.hpp>

#include "messages/broadcast.hpp"
#include "actors/status.hpp"
#include "actors/wire.hpp"
#include "common/log.hpp"
#include "training/replica.hpp"
#include "training/text_score.hpp"

namespace archipelago::actors {
namespace {

using namespace archipelago::messages;
using Clock = std::chrono::steady_clock;

struct Waiter {
  uint64_t version = 0;
  caf::response_promise promise;
  uint64_t request_id = 0;
};

struct EvaluatorState {
  EvaluatorSpec spec;
  std::unique_ptr<training::Replica> replica;
  std::vector<BroadcastCopy> fragments;  // B_p of every fragment, from broadcasts and store fetches
  TensorInbox inbox;
  Outbox outbox{"evaluator"};
  uint64_t scored_version = 0;
  uint64_t first_version = 0;   // the version held when the state first became complete
  double scored_loss = 0;
  uint64_t best_version = 0;    // the lowest held-out loss scored so far, and its version
  double best_loss = 0;
  double bytes_per_token = 1;   // of the held-out set's predicted tokens (bits per byte)
  bool eval_queued = false;
  std::vector<EvaluationPoint> curve;
  std::vector<Waiter> waiters;
  Clock::time_point started = Clock::now();
  Clock::time_point last_scored = Clock::now();  // its start, before the first score
  Clock::time_point fetch_sent{};
  std::shared_ptr<spdlog::logger> log = component_logger("evaluator");
  const char* name = "evaluator";
};

using EvaluatorActor = caf::stateful_actor<EvaluatorState>;

bool complete(const EvaluatorState& st) {
  for (const auto& f : st.fragments) {
    if (f.version == 0) return false;
  }
  return !st.fragments.empty();
}

uint64_t held_version(const EvaluatorState& st) {
  uint64_t v = 0;
  for (const auto& f : st.fragments) v = std::max(v, f.version);
  return v;
}

void fetch(EvaluatorActor* self) {
  auto& st = self->state;
  st.fetch_sent = Clock::now();
  auto store = Directory::get(self->system(), store_name());
  auto bytes = st.outbox.wrap(Fetch{"evaluator", {}});
  if (store && bytes) self->send(store, std::move(*bytes));
}

void score(EvaluatorActor* self) {
  auto& st = self->state;
  if (!complete(st) || !st.replica) return;
  const uint64_t version = held_version(st);
  if (version > st.scored_version) {
    const auto& layout = *st.spec.layout;
    std::vector<float> flat(layout.parameter_count);
    for (size_t p = 0; p < st.fragments.size(); ++p) {
      training::scatter_fragment(layout.plan, layout.parameters, static_cast<int>(p), st.fragments[p].values.data(),
                                 flat.data());
    }
    st.replica->write_parameters(flat);
    const auto begin = Clock::now();
    st.scored_loss = st.replica->evaluate(*st.spec.heldout);
    st.scored_version = version;
    st.last_scored = Clock::now();
    const double at = std::chrono::duration<double>(Clock::now() - st.started).count();
    st.curve.push_back({version, if_finite(st.scored_loss), if_finite(training::bits_per_byte(st.scored_loss, st.bytes_per_token)),
                        at, std::chrono::duration<double>(Clock::now() - begin).count()});
    if (std::isfinite(st.scored_loss) && (st.best_version == 0 || st.scored_loss < st.best_loss)) {
      st.best_version = version;
      st.best_loss = st.scored_loss;
    }
    st.log->info("version {}: held-out loss {:.4f}", version, st.scored_loss);
  }
  std::vector<Waiter> still;
  for (auto& w : st.waiters) {
    if (st.scored_version >= w.version) {
      w.promise.deliver(admin_reply("evaluator", w.request_id, true, "ok", st.curve.empty() ? EvaluationPoint{} : st.curve.back()));
    } else {
      still.push_back(std::move(w));
    }
  }
  st.waiters = std::move(still);
}

void maybe_schedule(EvaluatorActor* self) {
  auto& st = self->state;
  if (st.eval_queued || !complete(st)) return;
  const uint64_t every = static_cast<uint64_t>(std::max(1, st.spec.options->eval_every_versions));
  // The first version held is the run's starting point (the cluster scores it): count from there.
  if (st.scored_version == 0 && st.first_version == 0) st.first_version = held_version(st);
  const uint64_t since = st.scored_version > 0 ? st.scored_version : st.first_version;
  const double interval = st.spec.options->eval_interval_s;
  const bool due = held_version(st) >= since + every ||
                   (interval > 0 && held_version(st) > since &&
                    Clock::now() - st.last_scored >= std::chrono::duration<double>(interval));
  bool waited = false;
  for (const auto& w : st.waiters) waited = waited || held_version(st) >= w.version;
  if (due || waited) {
    st.eval_queued = true;
    self->send(self, eval_atom::value);
  }
}

caf::behavior evaluator_behavior(EvaluatorActor* self, EvaluatorSpec spec) {
  auto& st = self->state;
  st.spec = std::move(spec);
  st.bytes_per_token = training::bytes_per_predicted_token(*st.spec.heldout);
  st.fragments.resize(st.spec.layout->plan.fragments.size());
  self->send(self, init_atom::value);
  return {
      [=](init_atom) {
        auto& st = self->state;
        const auto& setup = st.spec.options->setup;
        auto replica = training::Replica::create(setup.model, setup.inner, setup.run.device, setup.run.seed);
        if (!replica) {
          st.log->error("cannot build the evaluation model: {}", replica.error().to_string());
          self->quit(caf::exit_reason::unhandled_exception);
          return;
        }
        st.replica = std::move(*replica);
        fetch(self);
        self->delayed_send(self, std::chrono::seconds(1), tick_atom::value);
      },
      [=](tick_atom) {
        auto& st = self->state;
        if (!complete(st) && Clock::now() - st.fetch_sent > std::chrono::seconds(2)) fetch(self);
        maybe_schedule(self);  // eval_interval_s may have passed with no new broadcast
        self->delayed_send(self, std::chrono::seconds(1), tick_atom::value);
      },
      [=](eval_atom) {
        self->state.eval_queued = false;
        score(self);
      },
      [=](WireBytes& bytes) {
        auto& st = self->state;
        auto envelope = unwrap(std::move(bytes));
        if (!envelope) return;
        auto* global = std::get_if<GlobalFragment>(&envelope->body);
        if (!global || global->fragment_id >= st.fragments.size()) return;
        auto added = st.inbox.add(envelope->sender_id + "/" + std::to_string(global->fragment_id) + "/" +
                                      std::to_string(global->version), global->chunk);
        if (!added || !added->complete) return;
        const auto p = global->fragment_id;
        const auto applied = apply_broadcast(st.fragments[p], global->version, global->delta_base, std::move(added->values));
        if (applied == ApplyResult::gap) {
          fetch(self);  // a delta against a version it does not hold: B_p comes from the store
          return;
        }
        if (applied == ApplyResult::applied) maybe_schedule(self);
      },
      [=](admin_atom, WireBytes& bytes) -> caf::result<WireBytes> {
        auto& st = self->state;
        auto request = read_admin_request(std::move(bytes));
        if (request && request->command == "evaluate") {
          Waiter w;
          w.version = request->args.empty() ? held_version(st) : std::strtoull(request->args[0].c_str(), nullptr, 10);
          w.request_id = request->request_id;
          w.promise = self->make_response_promise();
          st.waiters.push_back(w);
          if (held_version(st) < w.version) fetch(self);
          maybe_schedule(self);
          return w.promise;
        }
        EvaluatorStatus status;
        status.scored_version = st.scored_version;
        status.heldout_loss = if_finite(st.scored_loss);
        status.heldout_bits_per_byte = if_finite(training::bits_per_byte(st.scored_loss, st.bytes_per_token));
        status.heldout_bytes_per_token = st.bytes_per_token;
        status.held_version = held_version(st);
        status.curve = st.curve;
        status.best_version = st.best_version;
        if (st.best_version > 0) status.best_heldout_loss = st.best_loss;
        return admin_reply("evaluator", request ? request->request_id : 0, true, "ok", status);
      },
  };
}

}  // namespace

caf::actor spawn_evaluator(caf::actor_system& system, EvaluatorSpec spec) {
  return system.spawn<caf::detached>(evaluator_behavior, std::move(spec));
}

}  // namespace archipelago::actors
