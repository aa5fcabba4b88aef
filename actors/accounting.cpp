#include "actors/accounting.hpp"

#include <chrono>
#include <cmath>

namespace archipelago::actors {

nlohmann::json to_json(const Ledger& ledger) {
  const auto& s = ledger.seconds;
  const std::vector<std::pair<const char*, double>> parts = {
      {"rejected", s.rejected}, {"unmerged", s.unmerged}, {"recovering", s.recovering},
      {"waiting", s.waiting},   {"paused", s.paused},     {"overhead", s.overhead},
      {"restarting", s.restarting}, {"idle", s.idle}};
  nlohmann::json badput = nlohmann::json::object(), seconds = {{"merged", s.merged}};
  for (const auto& [name, value] : parts) {
    badput[name] = ledger.allocated_s > 0 ? value / ledger.allocated_s : 0.0;
    seconds[name] = value;
  }
  return {{"goodput", ledger.goodput()}, {"allocated_s", ledger.allocated_s}, {"badput", badput},
          {"seconds", seconds}};
}

namespace {

nlohmann::json member(const nlohmann::json& j, const std::string& key) {
  if (j.is_object()) {
    auto it = j.find(key);
    if (it != j.end() && it->is_object()) return *it;
  }
  return nlohmann::json::object();
}

// j[key] when it is a number, else 0.
double number_of(const nlohmann::json& j, const char* key) {
  if (!j.is_object()) return 0.0;
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : 0.0;
}

}  // namespace

const char* slot_state_name(messages::SlotState state) {
  static const char* names[] = {"running", "restarting", "finished", "failed"};
  return names[static_cast<int>(state)];
}

nlohmann::json slot_times_json(const messages::SlotReport& r) {
  return {{"lifetime_s", r.lifetime_seconds}, {"alive_s", r.alive_seconds},   {"recovery_s", r.recovery_seconds},
          {"compute_s", r.compute_seconds},   {"wait_s", r.wait_seconds},     {"paused_s", r.paused_seconds},
          {"restarting_s", r.restarting_seconds}};
}

namespace {

nlohmann::json report_json(const messages::SlotReport& r) {
  auto j = slot_times_json(r);
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

Ledger ledger_from_status(double wall_s, const std::vector<std::string>& slot_ids, const nlohmann::json& monitor,
                          const nlohmann::json& syncer, const nlohmann::json& syncer_at_start) {
  const auto slots = member(monitor, "slots");
  const auto learners = member(syncer, "learners");
  const auto learners_at_start = member(syncer_at_start, "learners");
  // A syncer shard merges its own fragments only, each a share of every step's compute: its ledger
  // is that share of the slots' time (the shards' ledgers add up to the run's).
  const auto shard = member(syncer, "shard");
  const double share = shard.is_object() && shard.contains("share") && shard["share"].is_number() ? shard["share"].get<double>() : 1.0;
  std::vector<SlotTimes> times;
  for (const auto& id : slot_ids) {
    const auto t = member(member(slots, id), "times");
    const auto merged = member(learners, id);
    const auto merged_before = member(learners_at_start, id);
    SlotTimes s;
    s.lifetime_s = share * number_of(t, "lifetime_s");
    s.alive_s = share * number_of(t, "alive_s");
    s.recovery_s = share * number_of(t, "recovery_s");
    s.compute_s = share * number_of(t, "compute_s");
    s.wait_s = share * number_of(t, "wait_s");
    s.paused_s = share * number_of(t, "paused_s");
    s.restarting_s = share * number_of(t, "restarting_s");
    s.merged_compute_s = number_of(merged, "compute_merged_s") - number_of(merged_before, "compute_merged_s");
    s.rejected_compute_s = number_of(merged, "compute_rejected_s") - number_of(merged_before, "compute_rejected_s");
    times.push_back(s);
  }
  return build_ledger(share * wall_s, times);
}

nlohmann::json operator_sample(double elapsed_s, uint64_t start_version, const nlohmann::json& syncer,
                               const nlohmann::json& monitor, const nlohmann::json& evaluator, const Ledger& ledger) {
  const bool scored = number_of(evaluator, "scored_version") > 0 && evaluator.is_object() &&
                      evaluator.contains("heldout_loss") && evaluator["heldout_loss"].is_number();
  int64_t restarts = 0;
  const auto slots = member(monitor, "slots");  // named: items() must not outlive it
  for (const auto& [id, r] : slots.items()) restarts += r.value("restarts", 0);
  return {{"elapsed_s", elapsed_s},
          {"version", static_cast<uint64_t>(number_of(syncer, "version"))},
          {"fragment_versions", syncer.is_object() && syncer.contains("fragment_versions") && syncer["fragment_versions"].is_array()
                                    ? syncer["fragment_versions"] : nlohmann::json::array()},
          {"start_version", start_version},
          {"heldout_loss", scored ? evaluator["heldout_loss"].get<double>() : std::nan("")},
          {"heldout_bits_per_byte", scored ? number_of(evaluator, "heldout_bits_per_byte") : std::nan("")},
          {"merged", static_cast<int64_t>(number_of(syncer, "merged_contributions"))},
          {"rejected", member(syncer, "rejected")},
          {"screening", member(syncer, "screening")},
          {"syncer_pending_bytes", static_cast<int64_t>(number_of(syncer, "pending_bytes"))},
          {"learner_states", member(monitor, "learners")},
          {"learner_restarts", restarts},
          {"goodput", to_json(ledger)}};
}

LearnerLinkBytes learner_link_bytes(const nlohmann::json& syncer, const nlohmann::json& store) {
  return {static_cast<int64_t>(number_of(syncer, "bytes_from_learners")),
          static_cast<int64_t>(number_of(syncer, "bytes_to_learners") + number_of(store, "bytes_served_learners"))};
}

int64_t ddp_equivalent_bytes(int64_t tokens, int64_t tokens_per_worker_step, int64_t parameters) {
  if (tokens_per_worker_step <= 0) return 0;
  return tokens / tokens_per_worker_step * 2 * parameters * static_cast<int64_t>(sizeof(float));
}

}  // namespace archipelago::actors
