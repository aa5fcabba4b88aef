#include "actors/accounting.hpp"

#include <chrono>
#include <cmath>

#include "training/data_parallel.hpp"

namespace archipelago::actors {

nlohmann::json to_json(const Ledger& ledger) {
  const auto& s = ledger.seconds;
  const std::vector<std::pair<const char*, double>> parts = {
      {"rejected", s.rejected},     {"in_flight", s.in_flight}, {"lost", s.lost},
      {"throttled", s.throttled},   {"recovering", s.recovering}, {"waiting", s.waiting},
      {"paused", s.paused},         {"overhead", s.overhead},   {"restarting", s.restarting},
      {"idle", s.idle},             {"unaccounted", s.unaccounted}};
  nlohmann::json badput = nlohmann::json::object(), seconds = {{"merged", s.merged}};
  for (const auto& [name, value] : parts) {
    badput[name] = ledger.share(value);
    seconds[name] = value;
  }
  return {{"goodput", ledger.goodput()}, {"allocated_s", ledger.allocated_s}, {"badput", badput},
          {"seconds", seconds}};
}

const char* slot_state_name(messages::SlotState state) {
  static const char* names[] = {"running", "restarting", "finished", "failed"};
  return names[static_cast<int>(state)];
}

SlotTimesStatus slot_times(const messages::SlotReport& r) {
  return {r.lifetime_seconds,     r.alive_seconds,        r.recovery_seconds,     r.compute_seconds,
          r.wait_seconds,         r.paused_seconds,       r.restarting_seconds,   r.throttled_seconds,
          r.overhead_seconds,     r.sent_compute_seconds, r.held_compute_seconds, r.left_compute_seconds,
          r.idle_seconds};
}

namespace {

nlohmann::json report_json(const messages::SlotReport& r) {
  nlohmann::json j = slot_times(r);
  j["reporter"] = r.reporter;
  j["incarnation"] = r.incarnation;
  j["restarts"] = r.restarts;
  return j;
}

Expected<messages::SlotReport> report_from_json(const std::string& id, const nlohmann::json& j) {
  if (!j.is_object()) return make_error(ErrorCode::invalid_argument, "ledger carry: slot " + id + " is not an object");
  messages::SlotReport r;
  r.learner_id = id;
  const std::pair<const char*, double*> times[] = {
      {"lifetime_s", &r.lifetime_seconds}, {"alive_s", &r.alive_seconds},     {"recovery_s", &r.recovery_seconds},
      {"compute_s", &r.compute_seconds},   {"wait_s", &r.wait_seconds},       {"paused_s", &r.paused_seconds},
      {"restarting_s", &r.restarting_seconds}};
  for (const auto& [key, out] : times) {
    auto it = j.find(key);
    if (it == j.end() || !it->is_number() || !std::isfinite(it->get<double>()) || it->get<double>() < 0) {
      return make_error(ErrorCode::invalid_argument,
                        std::string("ledger carry: slot ") + id + " has no valid " + key);
    }
    *out = it->get<double>();
  }
  // Measured since the ledger measures every part: a carry written before has none (0).
  const std::pair<const char*, double*> later[] = {
      {"throttled_s", &r.throttled_seconds},         {"overhead_s", &r.overhead_seconds},
      {"sent_compute_s", &r.sent_compute_seconds},   {"held_compute_s", &r.held_compute_seconds},
      {"left_compute_s", &r.left_compute_seconds},   {"idle_s", &r.idle_seconds}};
  for (const auto& [key, out] : later) {
    auto it = j.find(key);
    if (it == j.end()) continue;
    const bool signed_sum = out == &r.left_compute_seconds;  // less the restored work: may be negative
    if (!it->is_number() || !std::isfinite(it->get<double>()) || (!signed_sum && it->get<double>() < 0)) {
      return make_error(ErrorCode::invalid_argument,
                        std::string("ledger carry: slot ") + id + " has no valid " + key);
    }
    *out = it->get<double>();
  }
  auto reporter = j.find("reporter");
  if (reporter == j.end() || !reporter->is_number_unsigned()) {
    return make_error(ErrorCode::invalid_argument, "ledger carry: slot " + id + " has no reporter");
  }
  r.reporter = reporter->get<uint64_t>();
  r.incarnation = j.value("incarnation", 0u);
  r.restarts = j.value("restarts", 0u);
  return r;
}

}  // namespace

nlohmann::json to_json(const LedgerCarry& carry) {
  nlohmann::json slots = nlohmann::json::object();
  for (const auto& [id, slot] : carry.slots) slots[id] = {{"total", report_json(slot.total)}, {"raw", report_json(slot.raw)}};
  return {{"run_started_unix_s", carry.run_started_unix_s}, {"slots", slots}};
}

Expected<LedgerCarry> ledger_carry_from_json(const nlohmann::json& j) {
  if (!j.is_object()) return make_error(ErrorCode::invalid_argument, "ledger carry: not an object");
  LedgerCarry carry;
  auto started = j.find("run_started_unix_s");
  if (started == j.end() || !started->is_number() || !std::isfinite(started->get<double>()) ||
      started->get<double>() <= 0 || started->get<double>() > unix_seconds() + 60) {
    return make_error(ErrorCode::invalid_argument, "ledger carry: no valid run_started_unix_s (or one in the future)");
  }
  carry.run_started_unix_s = started->get<double>();
  auto slots = j.find("slots");
  if (slots == j.end() || !slots->is_object()) return make_error(ErrorCode::invalid_argument, "ledger carry: no slots");
  for (const auto& [id, slot] : slots->items()) {
    if (!slot.is_object()) return make_error(ErrorCode::invalid_argument, "ledger carry: slot " + id + " is not an object");
    auto total = report_from_json(id, slot.value("total", nlohmann::json()));
    if (!total) return total.error();
    auto raw = report_from_json(id, slot.value("raw", nlohmann::json()));
    if (!raw) return raw.error();
    carry.slots[id] = {*total, *raw};
  }
  return carry;
}

double unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

Ledger ledger_from_status(double wall_s, const std::vector<std::string>& slot_ids, const MonitorStatus& monitor,
                          const SyncerStatus& syncer, const SyncerAccounting& syncer_at_start) {
  // A syncer shard merges its own fragments only, each a share of every step's compute: its ledger
  // is that share of the slots' time (the shards' ledgers add up to the run's).
  const double share = syncer.shard.share;
  std::vector<SlotTimes> times;
  for (const auto& id : slot_ids) {
    auto slot = monitor.slots.find(id);
    const SlotTimesStatus t = slot == monitor.slots.end() ? SlotTimesStatus{} : slot->second.times;
    auto merged = syncer.learners.find(id);
    auto before = syncer_at_start.learners.find(id);
    const LearnerAccounting now = merged == syncer.learners.end() ? LearnerAccounting{} : LearnerAccounting(merged->second);
    const LearnerAccounting then = before == syncer_at_start.learners.end() ? LearnerAccounting{} : before->second;
    SlotTimes s;
    s.recovery_s = share * t.recovery_s;
    s.compute_s = share * t.compute_s;
    s.throttled_s = share * t.throttled_s;
    s.wait_s = share * t.wait_s;
    s.paused_s = share * t.paused_s;
    s.overhead_s = share * t.overhead_s;
    s.sent_compute_s = share * t.sent_compute_s;
    s.held_compute_s = share * t.held_compute_s;
    s.left_compute_s = share * t.left_compute_s;
    s.running = slot != monitor.slots.end() && slot->second.state == slot_state_name(messages::SlotState::running);
    s.restarting_s = share * t.restarting_s;
    // A slot no process ever reported on: the monitor's clock saw it with no incarnation all along.
    s.idle_s = share * (slot == monitor.slots.end() ? wall_s : t.idle_s);
    s.merged_compute_s = now.compute_merged_s - then.compute_merged_s;
    s.rejected_compute_s = now.compute_rejected_s - then.compute_rejected_s;
    times.push_back(s);
  }
  return build_ledger(share * wall_s, times);
}

double recent_train_loss(const MonitorStatus& monitor, const SyncerStatus& syncer) {
  if (monitor.train_loss) return *monitor.train_loss;
  return syncer.merged_contributions > 0 ? syncer.train_loss : std::nan("");
}

nlohmann::json operator_sample(double elapsed_s, uint64_t start_version, const SyncerStatus& syncer,
                               const MonitorStatus& monitor, const EvaluatorStatus& evaluator, const Ledger& ledger) {
  int64_t restarts = 0;
  for (const auto& [id, slot] : monitor.slots) restarts += slot.restarts;
  const bool scored = evaluator.scored();
  return {{"elapsed_s", elapsed_s},
          {"train_loss", recent_train_loss(monitor, syncer)},
          {"version", syncer.version},
          {"fragment_versions", syncer.fragment_versions},
          {"start_version", start_version},
          {"heldout_loss", scored ? *evaluator.heldout_loss : std::nan("")},
          {"heldout_bits_per_byte", scored ? evaluator.heldout_bits_per_byte.value_or(0.0) : std::nan("")},
          {"best_version", evaluator.best_version},
          {"best_heldout_loss", evaluator.best_heldout_loss.value_or(std::nan(""))},
          {"merged", syncer.merged_contributions},
          {"rejected", syncer.rejected},
          {"screening", syncer.screening},
          {"syncer_pending_bytes", syncer.pending_bytes},
          {"learner_states", monitor.learners},
          {"learner_restarts", restarts},
          {"goodput", to_json(ledger)}};
}

LearnerLinkBytes learner_link_bytes(const SyncerStatus& syncer, const StoreStatus& store) {
  return {syncer.bytes_from_learners, syncer.bytes_to_learners + store.bytes_served_learners};
}

int64_t ddp_equivalent_bytes(int64_t tokens, int64_t tokens_per_worker_step, int64_t parameters, int workers) {
  if (tokens_per_worker_step <= 0 || workers <= 1) return 0;
  const int64_t worker_steps = tokens / tokens_per_worker_step;
  return training::ring_allreduce_bytes(worker_steps, workers, parameters) / workers;
}

}  // namespace archipelago::actors
