#include "actors/syncer_core.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <set>
#include <sstream>

#include "actors/events.hpp"
#include "actors/initial_fragments.hpp"
#include "actors/wire.hpp"
#include "common/log.hpp"
#include "diloco/tunables.hpp"
#include "net/auth.hpp"
#include "training/replica.hpp"

namespace archipelago::actors {

using diloco::CreditedWork;
using diloco::FragmentSchedule;
using diloco::MergeAction;
using diloco::PendingFragment;
using diloco::ScheduleEpoch;
using diloco::check_staleness;
using diloco::credit_work;
using diloco::decide_merge;
namespace {

constexpr size_t kCommitHistory = 64;  // per fragment, for staleness; older bases are stale anyway

void ema(double& value, double sample, double gain = 0.2) { value = value == 0 ? sample : value + gain * (sample - value); }

// The counters of one learner that a committed version's manifest carries (restore_accounting reads them).
nlohmann::json learner_accounting(const LearnerRecord& r) {
  return {{"contributions_merged", r.contributions_merged},
          {"contributions_rejected", r.contributions_rejected},
          {"step_equivalents_merged", r.step_equivalents_merged},
          {"step_equivalents_rejected", r.step_equivalents_rejected},
          {"compute_merged_s", r.compute_merged_s},
          {"compute_rejected_s", r.compute_rejected_s},
          {"steps_merged_fragment0", r.steps_merged_fragment0},
          {"tokens_merged", r.tokens_merged},
          {"joins", r.joins},
          {"received_until", r.received_until}};
}

}  // namespace

const char* to_string(RejectReason reason) {
  switch (reason) {
    case RejectReason::stale: return "stale";
    case RejectReason::duplicate: return "duplicate";
    case RejectReason::unknown_learner: return "unknown_learner";
    case RejectReason::wrong_shape: return "wrong_shape";
    case RejectReason::non_finite: return "non_finite";
    case RejectReason::malformed: return "malformed";
    case RejectReason::unauthenticated: return "unauthenticated";
    case RejectReason::implausible_claim: return "implausible_claim";
    case RejectReason::non_finite_merge: return "non_finite_merge";
    case RejectReason::outlier: return "outlier";
    case RejectReason::not_owner: return "not_owner";
  }
  return "unknown";
}

RejectReason reject_reason_of(const Error& error) {
  return error.code == ErrorCode::non_finite ? RejectReason::non_finite : RejectReason::malformed;
}

Expected<Screening::Mode> parse_screen_mode(const std::string& name) {
  if (name == "none") return Screening::Mode::none;
  if (name == "clip") return Screening::Mode::clip;
  if (name == "refuse") return Screening::Mode::refuse;
  return make_error(ErrorCode::invalid_argument, "outer.screen: unknown mode '" + name + "' (expected none, clip or refuse)");
}

double Screening::median(std::vector<double> values) {
  if (values.empty()) return 0;
  const size_t mid = values.size() / 2;
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(mid), values.end());
  const double upper = values[mid];
  if (values.size() % 2) return upper;
  return (upper + *std::max_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(mid))) / 2;
}

Screening::Verdict Screening::judge(double norm, std::vector<double> known) const {
  Verdict verdict;
  if (mode == Mode::none) return verdict;
  if (known.size() < kMinKnown) {
    verdict.action = Action::hold;
    return verdict;
  }
  const double median = Screening::median(std::move(known));
  if (!(median > 0)) return verdict;  // nothing to compare with: zero updates
  verdict.ratio = norm / median;
  if (mode == Mode::refuse && verdict.ratio > refuse) {
    verdict.action = Action::refuse;
  } else if (verdict.ratio > clip) {
    verdict.action = Action::clip;
    verdict.scale = static_cast<float>(clip / verdict.ratio);
  }
  return verdict;
}

int64_t RejectCounters::total() const {
  int64_t sum = 0;
  for (const auto& [_, n] : by_reason) sum += n;
  return sum;
}

std::vector<int> StagedCommit::fragment_ids() const {
  std::vector<int> ids;
  for (const auto& f : fragments) ids.push_back(f.fragment);
  return ids;
}

const StagedFragment* StagedCommit::find(int fragment) const {
  for (const auto& f : fragments) {
    if (f.fragment == fragment) return &f;
  }
  return nullptr;
}

SyncerCore::SyncerCore(Sizes sizes, RuntimeOptions options)
    : options_(std::move(options)), mode_(options_.setup.run.mode) {
  const auto& outer = options_.setup.outer;
  rules_.mode = mode_;
  if (auto rule = training::parse_merge_rule(outer.merge)) rules_.merge = *rule;
  rules_.lr = outer.lr;
  rules_.momentum = outer.momentum;
  rules_.momentum_warmup = outer.momentum_warmup;
  rules_.delayed_nesterov = uses_delayed_nesterov(mode_, outer.optimizer);
  rules_.delayed_every = outer.delayed_every;
  if (auto codec = messages::parse_codec(outer.downlink_codec)) rules_.downlink = *codec;
  if (auto codec = messages::parse_codec(outer.codec)) uplink_ = *codec;
  rules_.merge_threads = outer.merge_threads;
  if (auto mode = parse_screen_mode(outer.screen)) screening_.mode = *mode;
  screening_.clip = outer.screen_clip;
  screening_.refuse = outer.screen_refuse;
  for (int64_t n : sizes.numels) {
    total_numel_ += n;
    FragmentState f;
    f.numel = n;
    f.sum = training::MergeAccumulator(n, rules_.merge, rules_.merge_threads);
    fragments_.push_back(std::move(f));
  }
  schedule_ = FragmentSchedule(options_.setup.run.inner_steps, static_cast<int>(fragments_.size()),
                               diloco::staggered(mode_));
  fragment_commits_.assign(fragments_.size(), 0);
  honest_norms_.assign(fragments_.size(), {});
  largest_passed_ratio_.assign(fragments_.size(), 0.0);
  tokens_per_step_ = configured_tokens_per_step(options_.setup);
  for (RejectReason r : kRejectReasons) rejects_.by_reason[to_string(r)] = 0;
}

SyncerCore::SyncerCore(RuntimeOptions options, std::vector<std::vector<float>> initial)
    : SyncerCore(Sizes{numels_of(initial)}, std::move(options)) {
  (void)hold_initial(std::move(initial));  // the sizes are the fragments' by construction
}

SyncerCore SyncerCore::without_values(RuntimeOptions options, std::vector<int64_t> numels) {
  return SyncerCore(Sizes{std::move(numels)}, std::move(options));
}

Status SyncerCore::hold_initial(std::vector<std::vector<float>> initial) {
  if (initial.size() != fragments_.size()) {
    return make_error(ErrorCode::invalid_argument, "initial parameters for " + std::to_string(initial.size()) +
                                                       " fragments, the model has " + std::to_string(fragments_.size()));
  }
  for (size_t p = 0; p < initial.size(); ++p) {
    if (static_cast<int64_t>(initial[p].size()) != fragments_[p].numel) {
      return make_error(ErrorCode::invalid_argument, "initial parameters of fragment " + std::to_string(p) +
                                                         " have the wrong size");
    }
  }
  for (size_t p = 0; p < initial.size(); ++p) {
    fragments_[p] = initial_fragment(std::move(initial[p]), rules_);
  }
  has_values_ = true;
  return {};
}

StagedCommit SyncerCore::stage_initial(double now_s) {
  StagedCommit commit;
  commit.ticket = ++last_ticket_;
  commit.initial = true;
  commit.started_s = now_s;
  for (int p = 0; p < fragment_count(); ++p) {
    StagedFragment staged;
    staged.fragment = p;
    hollow_[p] = hollow_of(fragments_[p]);
    staged.next = take_values(fragments_[p]);  // lent as they are: no copy
    commit.fragments.push_back(std::move(staged));
    in_flight_.insert(p);
  }
  return commit;
}

void SyncerCore::seal(StagedCommit& commit, double now_s) {
  commit.version = std::max(latest_version_, last_attempted_version_) + 1;
  last_attempted_version_ = commit.version;
  std::vector<uint64_t> fragment_versions;
  std::vector<int> carried;
  nlohmann::json outer_state = nlohmann::json::array();
  nlohmann::json contributors = nlohmann::json::array();
  for (int p = 0; p < fragment_count(); ++p) {
    const StagedFragment* staged = commit.find(p);
    fragment_versions.push_back(staged ? commit.version : fragments_[p].version);
    if (!staged) carried.push_back(p);
    const auto hollow = hollow_.find(p);
    outer_state.push_back(staged                    ? stored_entry(staged->next)
                          : hollow != hollow_.end() ? hollow->second.entry
                                                    : stored_entry(fragments_[p]));
    if (!staged) continue;
    for (const auto& c : staged->merged) {
      contributors.push_back({{"learner", c.learner_id}, {"fragment", p}, {"base", c.base_version},
                              {"share", staged->share}, {"round", c.round}, {"on_time", c.on_time},
                              {"staleness", c.staleness}, {"steps", c.steps}, {"tokens", c.tokens},
                              {"train_loss", c.train_loss}});
    }
  }
  commit.manifest = {{"version", commit.version}, {"mode", diloco::mode_name(mode_)}, {"fragments", commit.fragment_ids()},
                     {"carried", carried}, {"fragment_versions", fragment_versions},
                     {"outer_state", outer_state}};
  if (commit.initial) {
    commit.manifest["kind"] = "initial";
  } else {
    commit.manifest["contributors"] = contributors;
  }
  auto credited = learners_;
  credit(credited, commit, now_s);
  commit.manifest["accounting"] = accounting_json(credited);
  nlohmann::json norms = nlohmann::json::array();
  for (const auto& known : honest_norms_) norms.push_back(known);
  commit.manifest["screening_norms"] = norms;
}

Status SyncerCore::restore(uint64_t version, std::vector<std::vector<float>> broadcast,
                           std::vector<std::vector<float>> outer, const nlohmann::json& manifest) {
  if (broadcast.size() != fragments_.size() || outer.size() != fragments_.size()) {
    return make_error(ErrorCode::inconsistent, "stored version has " + std::to_string(broadcast.size()) +
                                                   " fragments, the model has " + std::to_string(fragments_.size()));
  }
  std::vector<uint64_t> fragment_versions(fragments_.size(), version);
  if (manifest.contains("fragment_versions") && manifest["fragment_versions"].size() == fragments_.size()) {
    fragment_versions = manifest["fragment_versions"].get<std::vector<uint64_t>>();
  }
  const nlohmann::json entries = manifest.value("outer_state", nlohmann::json::array());
  std::vector<FragmentState> restored;
  for (size_t p = 0; p < fragments_.size(); ++p) {
    if (static_cast<int64_t>(broadcast[p].size()) != fragments_[p].numel) {
      return make_error(ErrorCode::inconsistent, "stored fragment " + std::to_string(p) + " has the wrong shape");
    }
    const nlohmann::json entry = p < entries.size() ? entries[p] : nlohmann::json();
    auto value = from_stored(std::move(broadcast[p]), std::move(outer[p]), entry, fragment_versions[p], rules_);
    if (!value) {
      return make_error(ErrorCode::inconsistent, "stored fragment " + std::to_string(p) + ": " + value.error().reason);
    }
    restored.push_back(std::move(*value));
  }
  fragments_ = std::move(restored);
  latest_version_ = version;
  last_attempted_version_ = std::max(last_attempted_version_, version);
  in_flight_.clear();
  if (manifest.contains("accounting")) restore_accounting(manifest["accounting"]);
  // The screening's known norms, so that a restarted syncer screens from its first update.
  const nlohmann::json norms = manifest.value("screening_norms", nlohmann::json::array());
  for (size_t p = 0; p < fragments_.size() && p < norms.size(); ++p) {
    if (!norms[p].is_object()) continue;
    honest_norms_[p].clear();
    for (const auto& [learner, v] : norms[p].items()) {
      if (v.is_number() && std::isfinite(v.get<double>()) && v.get<double>() >= 0) honest_norms_[p][learner] = v.get<double>();
    }
  }
  hollow_.clear();
  has_values_ = true;
  release_unowned();
  return {};
}

Expected<std::pair<std::string, std::string>> SyncerCore::set(const std::string& key, const std::string& value) {
  // Which keys, under which names, and the bounds of their values: diloco/tunables.hpp (the
  // configuration checks the same bounds at start).
  auto tunable = diloco::lookup_tunable(key);
  if (!tunable) return tunable.error();
  auto parse = [&] { return diloco::check_tunable_number(**tunable, value, options_.setup.run.learners); };
  auto text = [](double v) {
    std::ostringstream out;
    out << v;
    return out.str();
  };
  if (key == "outer.lr") {
    auto number = parse();
    if (!number) return number.error();
    std::pair<std::string, std::string> change{text(rules_.lr), text(*number)};
    rules_.lr = options_.setup.outer.lr = *number;
    return change;
  }
  if (key == "outer.momentum") {
    auto number = parse();
    if (!number) return number.error();
    std::pair<std::string, std::string> change{text(rules_.momentum), text(*number)};
    rules_.momentum = options_.setup.outer.momentum = *number;
    return change;
  }
  if (key == "outer.quorum") {
    auto number = parse();
    if (!number) return number.error();
    std::pair<std::string, std::string> change{std::to_string(options_.setup.outer.quorum), text(*number)};
    options_.setup.outer.quorum = static_cast<int>(*number);
    return change;
  }
  if (key == "outer.downlink_codec") {
    if (Status ok = diloco::check_tunable_choice(**tunable, value); !ok) return ok.error();
    auto codec = messages::parse_codec(value);
    if (!codec) return make_error(ErrorCode::invalid_argument, "outer.downlink_codec: " + codec.error().reason);
    // Every broadcast names its codec and B_p advances by what receivers decode: a switch is safe.
    std::pair<std::string, std::string> change{messages::codec_name(rules_.downlink), messages::codec_name(*codec)};
    rules_.downlink = *codec;
    options_.setup.outer.downlink_codec = value;
    return change;
  }
  if (key == "outer.codec") {
    if (Status ok = diloco::check_tunable_choice(**tunable, value); !ok) return ok.error();
    auto codec = messages::parse_codec(value);
    if (!codec) return make_error(ErrorCode::invalid_argument, "outer.codec: " + codec.error().reason);
    // Learners switch at their next send; their error feedback keeps its fp32 residual across the
    // switch, and every update names its codec, so updates in flight decode as they were sent.
    std::pair<std::string, std::string> change{messages::codec_name(uplink_), messages::codec_name(*codec)};
    uplink_ = *codec;
    options_.setup.outer.codec = value;
    return change;
  }
  if (key == "outer.grace_max_s" || key == "outer.grace_gamma") {
    auto number = parse();
    if (!number) return number.error();
    double& field = key == "outer.grace_max_s" ? options_.syncer.grace_max_s : options_.syncer.grace_gamma;
    std::pair<std::string, std::string> change{text(field), text(*number)};
    field = *number;
    return change;
  }
  if (key == "outer.max_staleness") {
    auto number = parse();
    if (!number) return number.error();
    std::pair<std::string, std::string> change{std::to_string(options_.syncer.max_staleness), text(*number)};
    options_.syncer.max_staleness = static_cast<int>(*number);
    return change;
  }
  if (key == "train.inner_steps") {
    if (diloco::whole_rounds(mode_)) {
      return make_error(ErrorCode::invalid_argument,
                        "'" + key + "' is fixed for a " + diloco::mode_name(mode_) + " run: its rounds are aligned across learners and a "
                        "restarted learner redoes its round from a multiple of H; restart from the committed version "
                        "with --set " + key + "=" + value);
    }
    auto number = parse();
    if (!number) return number.error();
    // From one period past the leading learner's last update: every learner hears of it (the next
    // broadcasts) before it gets there, and each evaluates the same schedule of its own steps.
    uint64_t leading = 0;
    for (const auto& [id, r] : learners_) {
      for (uint64_t until : r.received_until) leading = std::max(leading, until);
    }
    const int old_h = schedule_.period_at(static_cast<int64_t>(leading));
    const int64_t from = std::max<int64_t>(static_cast<int64_t>(leading) + old_h, schedule_.epochs().back().from_step + 1);
    if (Status changed = schedule_.change(from, static_cast<int>(*number)); !changed) return changed.error();
    options_.setup.run.inner_steps = static_cast<int>(*number);
    return std::pair<std::string, std::string>{std::to_string(old_h), text(*number) + " from step " + std::to_string(from)};
  }
  // A key of the table that no branch above applies: the table and this function disagree.
  return make_error(ErrorCode::inconsistent, "'" + key + "' is runtime-tunable, but the syncer does not apply it");
}

std::vector<int> SyncerCore::fragments_with_pending() const {
  std::vector<int> ids;
  for (int p = 0; p < fragment_count(); ++p) {
    if (!fragments_[p].pending.empty()) ids.push_back(p);
  }
  return ids;
}

messages::Welcome SyncerCore::join(const messages::Join& join, double now_s) {
  messages::Welcome welcome;
  welcome.fragment_count = static_cast<uint32_t>(fragments_.size());
  welcome.version = latest_version_;
  if (!net::tokens_equal(join.auth_token, options_.syncer.auth_token)) {  // constant time
    count_reject(RejectReason::unauthenticated, join.learner_id);
    welcome.reason = "unauthenticated: wrong auth token";
    welcome.refusal = messages::JoinRefusal::unauthenticated;
    return welcome;
  }
  if (learner_index(join.learner_id) < 0) {
    count_reject(RejectReason::unknown_learner, join.learner_id);
    welcome.reason = "unauthenticated: learner ids are learner-<n>";
    welcome.refusal = messages::JoinRefusal::unauthenticated;
    return welcome;
  }
  auto& record = learners_[join.learner_id];
  record.id = join.learner_id;
  record.active = true;
  record.finished = false;
  record.last_sequence = 0;
  record.joined_version = latest_version_;
  record.joined_s = now_s;
  record.first_merge_after_join_s = -1;
  record.joins += 1;
  record.received_until.resize(fragments_.size(), 0);
  welcome.received_until = record.received_until;
  // The version each fragment last changed at: a learner that rejoins after missing broadcasts (a
  // frozen or cut-off node) sees at once that it holds older ones, and fetches the state.
  for (const auto& f : fragments_) welcome.fragment_versions.push_back(f.version);
  welcome.accepted = true;
  return welcome;
}

void SyncerCore::leave(const std::string& learner_id, bool finished, const std::string& reason, double now_s) {
  auto it = learners_.find(learner_id);
  if (it == learners_.end()) return;
  it->second.active = false;
  it->second.finished = it->second.finished || finished;
  component_logger("syncer")->info("{} left ({}): quorum now counts {} active learner(s)", learner_id, reason,
                                   active_learners());
}

int SyncerCore::active_learners() const {
  int n = 0;
  for (const auto& [_, r] : learners_) n += r.active ? 1 : 0;
  return n;
}

double SyncerCore::fastest_tokens_per_s() const {
  double fastest = 0;
  for (const auto& [_, r] : learners_) {
    if (r.active) fastest = std::max(fastest, r.tokens_per_s);
  }
  return fastest;
}

void SyncerCore::count_reject(RejectReason reason, const std::string& learner_id, double step_equivalents,
                              double compute_s) {
  rejects_.by_reason[to_string(reason)] += 1;
  if (options_.events) options_.events->add("rejected", learner_id.empty() ? "?" : learner_id, to_string(reason));
  auto it = learners_.find(learner_id);
  if (it != learners_.end()) {
    it->second.contributions_rejected += 1;
    it->second.step_equivalents_rejected += step_equivalents;
    it->second.compute_rejected_s += compute_s;
  }
}

std::optional<RejectReason> SyncerCore::screen(const std::string& sender_id, uint64_t sequence,
                                               const messages::FragmentUpdate& update) {
  auto it = learners_.find(update.learner_id);
  if (it == learners_.end() || !it->second.active || sender_id != update.learner_id) {
    return RejectReason::unknown_learner;
  }
  if (sequence <= it->second.last_sequence) return RejectReason::duplicate;
  it->second.last_sequence = sequence;
  if (update.tokens_per_sec > 0) it->second.tokens_per_s = update.tokens_per_sec;
  if (update.fragment_id >= fragments_.size() ||
      update.chunk.element_count != static_cast<uint64_t>(fragments_[update.fragment_id].numel)) {
    return RejectReason::wrong_shape;
  }
  if (!options_.shard.owns(static_cast<int>(update.fragment_id))) return RejectReason::not_owner;
  return std::nullopt;
}

int SyncerCore::effective_quorum() const {
  return std::max(1, std::min(options_.setup.outer.quorum, std::max(1, active_learners())));
}

uint64_t SyncerCore::on_time_round(int p) const {
  // Normally the open round. When every learner that kept the schedule has gone, the ones left are
  // all behind it: their next slot opens the round instead, so the run never waits for the dead.
  int64_t leading = -1;
  for (const auto& [_, r] : learners_) {
    if (r.active && p < static_cast<int>(r.last_round.size())) leading = std::max(leading, r.last_round[p]);
  }
  const uint64_t open = fragments_[p].next_round;
  if (leading < 0) return open;
  return std::min<uint64_t>(open, static_cast<uint64_t>(leading) + 1);
}

void SyncerCore::update_quorum(int p, double now_s) {
  auto& f = fragments_[p];
  std::set<std::string> on_time;
  double first_on_time_s = -1;  // the round's quorum time runs from its first on-time arrival
  for (const auto& c : f.pending) {
    if (!c.on_time) continue;
    on_time.insert(c.learner_id);
    if (first_on_time_s < 0 || c.arrived_s < first_on_time_s) first_on_time_s = c.arrived_s;
  }
  if (on_time.empty()) {
    f.quorum_reached_s = -1;
    return;
  }
  if (f.quorum_reached_s < 0 && static_cast<int>(on_time.size()) >= effective_quorum()) {
    f.quorum_reached_s = now_s;
    ema(timings_.quorum_s, now_s - first_on_time_s);
  }
}

std::optional<RejectReason> SyncerCore::accept(const UpdateHeader& h, std::vector<float> delta, double now_s) {
  Payload payload;
  payload.values = std::move(delta);
  return accept(h, std::move(payload), now_s);
}

std::optional<RejectReason> SyncerCore::accept(const UpdateHeader& h, Payload payload, double now_s) {
  if (!options_.shard.owns(static_cast<int>(h.fragment))) {
    count_reject(RejectReason::not_owner, h.learner_id, 0, h.compute_s);
    return RejectReason::not_owner;
  }
  auto& f = fragments_[h.fragment];
  const double share = fragment_share(static_cast<int>(h.fragment));
  const CreditedWork work = credit_work(h.inner_steps, h.tokens, schedule_.largest_period(), tokens_per_step_);
  if (!work.accept) {
    component_logger("syncer")->warn("rejected update of fragment {} from {}: {}", h.fragment, h.learner_id,
                                     work.reason);
    count_reject(RejectReason::implausible_claim, h.learner_id, 0, h.compute_s);
    return RejectReason::implausible_claim;
  }
  auto& record = learners_[h.learner_id];
  record.received_until.resize(fragments_.size(), 0);
  auto duplicate = [&](const std::string& why) {
    component_logger("syncer")->warn("rejected update of fragment {} from {} (steps {}..{}, base {}): {}", h.fragment,
                                     h.learner_id, h.from_step, h.to_step, h.base_version, why);
    count_reject(RejectReason::duplicate, h.learner_id, work.steps * share, h.compute_s);
    return RejectReason::duplicate;
  };
  if (diloco::staggered(mode_)) {
    // A learner's data position only moves on, so work that starts before the end of work already
    // accepted from it was sent before: e.g. by its previous incarnation, after the checkpoint it
    // restarted from. Merging it again would count those steps twice. (Two pending updates of one
    // learner on the same base are fine here: an old incarnation's and the new one's are distinct work.)
    if (h.from_step < record.received_until[h.fragment]) {
      return duplicate("its work starts before the end of work already accepted from it (step " +
                       std::to_string(record.received_until[h.fragment]) + ")");
    }
  } else {
    // Sync and ddp: a restarted learner redoes its round from the same base; one of the two is kept.
    for (const auto& c : f.pending) {
      if (c.learner_id == h.learner_id && c.base_version == h.base_version) {
        return duplicate("an update of it on the same base is pending");
      }
    }
  }
  auto staleness = check_staleness(h.base_version, f.commit_versions, latest_version_, options_.syncer.max_staleness);
  if (!staleness.accept) {
    component_logger("syncer")->warn("rejected update of fragment {} from {}: {}", h.fragment, h.learner_id,
                                     staleness.reason);
    count_reject(RejectReason::stale, h.learner_id, work.steps * share, h.compute_s);
    return RejectReason::stale;
  }
  if (work.corrected) {
    claims_corrected_ += 1;
    if (claims_logged_.insert(h.learner_id).second) {
      component_logger("syncer")->warn("update of fragment {} from {}: {} (logged once per learner; counted in "
                                       "claims_corrected)", h.fragment, h.learner_id, work.reason);
    }
  }
  const std::string key = h.learner_id + "/" + std::to_string(h.fragment);
  if (auto last = last_arrival_.find(key); last != last_arrival_.end()) {
    ema(timings_.step_s, (now_s - last->second) / static_cast<double>(work.steps));
  }
  last_arrival_[key] = now_s;

  PendingContribution c;
  c.learner = learner_index(h.learner_id);
  c.learner_id = h.learner_id;
  c.fragment = static_cast<int>(h.fragment);
  c.base_version = h.base_version;
  c.round = h.round;
  c.on_time = !diloco::numbered_rounds(mode_) || h.round >= on_time_round(c.fragment);
  c.steps = work.steps;
  c.tokens = work.tokens;
  c.train_loss = h.train_loss;
  c.compute_s = h.compute_s;
  c.staleness = staleness.staleness;
  c.arrived_s = now_s;
  // Folded straight from the codes when nothing needs the decoded Δ (Delayed Nesterov keeps it).
  const bool fused = !payload.encoded.empty() && !rules_.delayed_nesterov;
  auto decoded = [&]() -> Expected<std::vector<float>> {
    if (payload.encoded.empty()) return std::move(payload.values);
    return messages::decode_tensor(payload.codec, payload.encoded.data(), payload.encoded.size(),
                                   static_cast<size_t>(f.numel));
  };
  auto refuse_payload = [&](const Error& error) {
    const auto reason = reject_reason_of(error);
    component_logger("syncer")->warn("rejected update of fragment {} from {}: {}", h.fragment, h.learner_id,
                                     error.to_string());
    count_reject(reason, h.learner_id, work.steps * share, h.compute_s);
    return reason;
  };
  const double fold_started_s = monotonic_seconds();
  std::vector<float> delta;
  if (fused) {
    auto norm = messages::quantized_norm(payload.codec, payload.encoded.data(), payload.encoded.size(),
                                         static_cast<size_t>(f.numel));
    if (!norm) return refuse_payload(norm.error());
    c.norm = *norm;
  } else {
    auto values = decoded();
    if (!values) return refuse_payload(values.error());
    delta = std::move(*values);
    if (static_cast<int64_t>(delta.size()) != f.numel) {
      return refuse_payload(make_error(ErrorCode::inconsistent, "the update has the wrong number of elements"));
    }
    c.norm = training::l2_norm(delta.data(), f.numel, rules_.merge_threads);
  }
  c.screen_norm = c.norm / learning_rate_sum(h.from_step, h.to_step, work.steps);
  const auto verdict = screening_.judge(c.screen_norm, known_norms(c.fragment));
  if (verdict.action == Screening::Action::hold) {
    if (fused) {  // held as its codes (checked by quantized_norm), not decoded
      c.codec = payload.codec;
      c.encoded = std::move(payload.encoded);
    } else {
      c.delta = std::move(delta);
    }
    c.screened = false;
    held_ += 1;
  } else {
    if (!apply_verdict(c.fragment, c, verdict, delta)) return RejectReason::outlier;
    if (fused) fold_encoded(c.fragment, c, payload.codec, payload.encoded);
    else fold(c.fragment, c, std::move(delta));
  }
  fold_s_ += monotonic_seconds() - fold_started_s;
  record.last_round.resize(fragments_.size(), -1);
  record.received_until[h.fragment] = std::max(record.received_until[h.fragment], h.to_step);
  record.last_round[h.fragment] = std::max<int64_t>(record.last_round[h.fragment], static_cast<int64_t>(h.round));
  const bool held = !c.screened;
  f.pending.push_back(std::move(c));
  update_quorum(static_cast<int>(h.fragment), now_s);
  // Enough norms with the held ones: judge them now, so that at most kMinKnown deltas are ever held.
  if (held && norms_with_held(static_cast<int>(h.fragment)).size() >= Screening::kMinKnown) {
    settle_held(static_cast<int>(h.fragment), now_s);
  }
  return std::nullopt;
}

double SyncerCore::learning_rate_sum(uint64_t from_step, uint64_t to_step, int64_t credited_steps) const {
  // The credited steps bound the span: a claimed span cannot make an update look smaller. An update
  // that names no span (to ≤ from) counts its credited steps, ending at to_step where it can.
  const int64_t credited = std::max<int64_t>(1, credited_steps);
  const auto from = static_cast<int64_t>(from_step), to = static_cast<int64_t>(to_step);
  const int64_t span = to > from ? std::min(to - from, credited) : credited;
  const int64_t start = std::max<int64_t>(0, to - span);
  double sum = 0;
  for (int64_t t = start; t < start + span; ++t) sum += training::scheduled_learning_rate(options_.setup.inner, t);
  return sum > 0 ? sum : 1.0;  // an inner lr of 0 trains nothing: plain norms
}

std::vector<double> SyncerCore::known_norms(int p) const {
  std::vector<double> known;
  for (const auto& [_, norm] : honest_norms_[p]) known.push_back(norm);
  return known;
}

std::vector<double> SyncerCore::norms_with_held(int p) const {
  std::vector<double> norms = known_norms(p);
  for (const auto& c : fragments_[p].pending) {
    if (!c.screened) norms.push_back(c.screen_norm);
  }
  return norms;
}

double SyncerCore::fragment_share(int p) const {
  return static_cast<double>(fragments_[p].numel) / static_cast<double>(std::max<int64_t>(1, total_numel_));
}

double SyncerCore::merge_weight_of(const PendingContribution& c) const {
  return training::merge_weight(c.tokens, std::max<int64_t>(1, c.steps), rules_.merge);
}

void SyncerCore::remember_norm(int p, const std::string& learner_id, double norm) { honest_norms_[p][learner_id] = norm; }

bool SyncerCore::apply_verdict(int p, PendingContribution& c, const Screening::Verdict& verdict,
                               std::vector<float>& delta) {
  c.screened = true;
  if (verdict.action == Screening::Action::refuse) {
    component_logger("syncer")->warn("refused the update of fragment {} from {} as an outlier: its norm ({:.4g}) per "
                                     "unit of inner lr is {:.3g} times the median of the learners' latest honest ones "
                                     "(outer.screen_refuse = {})", p, c.learner_id, c.norm, verdict.ratio, screening_.refuse);
    count_reject(RejectReason::outlier, c.learner_id, c.steps * fragment_share(p), c.compute_s);
    return false;
  }
  if (verdict.action == Screening::Action::clip) {
    c.scale = verdict.scale;
    for (auto& v : delta) v *= verdict.scale;
    clipped_ += 1;
    if (options_.events) {
      options_.events->add("clipped", c.learner_id,
                           "fragment " + std::to_string(p) + ": norm " + std::to_string(verdict.ratio) + " medians");
    }
    component_logger("syncer")->warn("clipped the update of fragment {} from {}: its norm ({:.4g}) per unit of inner lr "
                                     "is {:.3g} times the median of the learners' latest honest ones (outer.screen_clip = {})",
                                     p, c.learner_id, c.norm, verdict.ratio, screening_.clip);
    remember_norm(p, c.learner_id, c.screen_norm * verdict.scale);
    return true;
  }
  largest_passed_ratio_[p] = std::max(largest_passed_ratio_[p], verdict.ratio);
  remember_norm(p, c.learner_id, c.screen_norm);
  return true;
}

void SyncerCore::fold(int p, PendingContribution& c, std::vector<float> delta) {
  if (rules_.delayed_nesterov) {  // per-arrival steps: not a sum
    c.delta = std::move(delta);
    return;
  }
  fragments_[p].sum.add(delta.data(), merge_weight_of(c), c.norm * c.scale);
  c.delta = {};
}

void SyncerCore::fold_encoded(int p, PendingContribution& c, messages::Codec codec, const std::vector<uint8_t>& encoded) {
  float* sum = nullptr;
  const float factor = fragments_[p].sum.add_external(merge_weight_of(c), c.norm * c.scale, &sum);
  // The codes were checked by quantized_norm: this cannot fail.
  (void)messages::accumulate_quantized(codec, encoded.data(), encoded.size(),
                                       static_cast<size_t>(fragments_[p].numel), factor * c.scale, sum,
                                       rules_.merge_threads);
}

void SyncerCore::settle_held(int p, double now_s) {
  auto& f = fragments_[p];
  const std::vector<double> known = norms_with_held(p);
  std::vector<PendingContribution> kept;
  for (auto& c : f.pending) {
    if (c.screened) {
      kept.push_back(std::move(c));
      continue;
    }
    auto verdict = screening_.judge(c.screen_norm, known);
    if (verdict.action == Screening::Action::hold) {  // too few norms even with the round's: merged unscreened
      verdict = {};
      unscreened_ += 1;
    }
    std::vector<float> delta = std::move(c.delta);
    std::vector<uint8_t> encoded = std::move(c.encoded);
    c.delta = {};
    c.encoded = {};
    if (!apply_verdict(p, c, verdict, delta)) continue;
    if (!encoded.empty()) fold_encoded(p, c, c.codec, encoded);
    else fold(p, c, std::move(delta));
    kept.push_back(std::move(c));
  }
  f.pending = std::move(kept);
  update_quorum(p, now_s);
}

std::vector<int> SyncerCore::ready_fragments(double now_s, double* next_deadline_s) {
  *next_deadline_s = -1;
  std::vector<int> ready;
  const double grace = grace_s();
  for (int p = 0; p < fragment_count(); ++p) {
    if (!options_.shard.owns(p)) continue;  // another shard's: never merged here
    update_quorum(p, now_s);  // the quorum shrinks when learners leave
    if (fragment_in_flight(p)) continue;  // looked at again when its commit has landed or failed
    const auto& f = fragments_[p];
    PendingFragment pending;
    std::set<std::string> on_time, any;
    for (const auto& c : f.pending) {
      any.insert(c.learner_id);
      if (c.on_time) on_time.insert(c.learner_id);
    }
    pending.contributors = static_cast<int>(on_time.size());
    pending.late = static_cast<int>(any.size() - on_time.size());
    pending.active_learners = active_learners();
    for (const auto& id : any) {
      auto it = learners_.find(id);
      if (it != learners_.end() && it->second.active) pending.contributors_active += 1;
    }
    pending.quorum_reached_s = f.quorum_reached_s;
    auto decision = decide_merge(mode_, now_s, pending, options_.setup.outer.quorum, grace);
    if (decision.action == MergeAction::merge_now) {
      ready.push_back(p);
    } else if (decision.action == MergeAction::wait_until) {
      if (*next_deadline_s < 0 || decision.deadline_s < *next_deadline_s) *next_deadline_s = decision.deadline_s;
    }
  }
  return ready;
}

Expected<StagedCommit> SyncerCore::stage(const std::vector<int>& fragment_ids, double now_s) {
  for (int p : fragment_ids) {
    if (fragment_in_flight(p))
      return make_error(ErrorCode::conflict, "fragment " + std::to_string(p) + " has a commit in flight");
  }
  StagedCommit commit;
  commit.started_s = now_s;
  int dropped = 0;
  std::optional<Error> failed;  // a fragment that could not be staged (a bug): the others go on
  for (int p : fragment_ids) {
    settle_held(p, now_s);
    const auto& f = fragments_[p];
    if (f.pending.empty()) continue;
    // Decoupled: a period merged in pieces (quorum + grace, stragglers in the next round) must move θ
    // as far as one merged at once, so each piece counts for its share of the expected contributors.
    double share = 1.0;
    if (diloco::numbered_rounds(mode_)) {
      std::set<std::string> contributors_of_round, expected;
      for (const auto& c : f.pending) contributors_of_round.insert(c.learner_id);
      expected = contributors_of_round;
      for (const auto& [id, r] : learners_) {
        if (r.active) expected.insert(id);
      }
      share = static_cast<double>(contributors_of_round.size()) / static_cast<double>(expected.size());
    }
    auto staged = stage_fragment(p, f, rules_, share);
    if (!staged && staged.error().code == ErrorCode::non_finite) {
      drop_non_finite_merge(p, staged.error().reason, now_s);
      dropped += 1;
      continue;
    }
    if (!staged) {
      component_logger("syncer")->error("fragment {} cannot be staged: {}", p, staged.error().to_string());
      if (!failed) failed = staged.error();
      continue;
    }
    staged->share = share;
    lend(p);  // before the next fragment is staged: one fragment is held twice at a time, not all
    commit.fragments.push_back(std::move(*staged));
  }
  if (commit.fragments.empty() && failed) return *failed;
  if (commit.fragments.empty() && dropped > 0) {
    return make_error(ErrorCode::non_finite, "every merge came out non-finite and was dropped");
  }
  if (commit.fragments.empty()) return make_error(ErrorCode::invalid_argument, "no fragment had pending updates");
  commit.ticket = ++last_ticket_;
  // What arrives from now on starts a new running sum; the staged values hold what this one merged.
  for (auto& staged : commit.fragments) {
    auto& sum = fragments_[staged.fragment].sum;
    sum = sum.fresh();  // merged: a failed commit is sent again as it is (commit_failed)
    in_flight_.insert(staged.fragment);
  }
  return commit;
}

void SyncerCore::drop_non_finite_merge(int p, const std::string& why, double now_s) {
  auto& f = fragments_[p];
  const double share = fragment_share(p);
  std::set<std::string> contributors;
  for (const auto& c : f.pending) {
    count_reject(RejectReason::non_finite_merge, c.learner_id, c.steps * share, c.compute_s);
    contributors.insert(c.learner_id);
  }
  std::string names;
  for (const auto& id : contributors) names += (names.empty() ? "" : ", ") + id;
  component_logger("syncer")->error("{}: the merge of {} update(s) from {} is dropped (counted as non_finite_merge); "
                                    "fragment {} stays at version {}", why, f.pending.size(), names, p, f.version);
  // Kept pending, they would make the same merge again at every attempt.
  f.pending.clear();
  f.sum = f.sum.fresh();
  update_quorum(p, now_s);
}

void SyncerCore::commit_succeeded(StagedCommit& commit, double now_s) {
  for (const auto& staged : commit.fragments) in_flight_.erase(staged.fragment);
  latest_version_ = std::max(latest_version_, commit.version);
  commits_ += 1;
  credit(learners_, commit, now_s);
  for (auto& staged : commit.fragments) {
    const int p = staged.fragment;
    for (const auto& c : staged.merged) {
      merges_ += 1;
      loss_sum_ += c.train_loss;
      loss_count_ += 1;
    }
    if (!staged.merged.empty()) fragment_commits_[p] += 1;
    hollow_.erase(p);  // its values are back: the staged ones
    // Moves the staged value in; the commit keeps its downlink message for the broadcast.
    fragments_[p] = commit_fragment(std::move(staged), std::move(fragments_[p]), commit.version, kCommitHistory);
    update_quorum(p, now_s);
  }
  if (loss_count_ > 0) last_train_loss_ = loss_sum_ / loss_count_;
  loss_sum_ = 0;
  loss_count_ = 0;
  ema(timings_.sync_s, now_s - commit.started_s);
  if (commit.initial) release_unowned();
}

void SyncerCore::release_unowned() {
  for (int p = 0; p < fragment_count(); ++p) {
    if (options_.shard.owns(p) || hollow_.count(p)) continue;
    auto& f = fragments_[p];
    hollow_[p] = hollow_of(f);  // what every record says of it, as version 1 stored it
    drop_values(f);
    f.outer = training::OuterState{};
  }
}

SyncerCore::HollowFragment SyncerCore::hollow_of(const FragmentState& f) const {
  return HollowFragment{stored_entry(f), broadcast_digest(f.broadcast), stored_outer_digest(f)};
}

void SyncerCore::lend(int p) {
  hollow_[p] = hollow_of(fragments_[p]);
  drop_values(fragments_[p]);
}

void SyncerCore::commit_failed(StagedCommit& commit, const std::string& reason) {
  const std::string which = commit.version ? "version " + std::to_string(commit.version)
                                           : "ticket " + std::to_string(commit.ticket);
  failed_commits_ += 1;
  if (commit.initial) {
    for (auto& staged : commit.fragments) {
      in_flight_.erase(staged.fragment);
      hollow_.erase(staged.fragment);
      give_back_values(fragments_[staged.fragment], std::move(staged.next));
    }
    component_logger("syncer")->error("commit of {} (the initial parameters) failed ({})", which, reason);
    return;
  }
  size_t merged = 0;
  for (const auto& f : commit.fragments) merged += f.merged.size();
  commit.attempts += 1;
  commit.ticket = ++last_ticket_;
  commit.version = 0;
  commit.manifest = nlohmann::json();
  component_logger("syncer")->error("commit of {} failed ({}): its {} fragment(s) stay staged, with {} "
                                    "contribution(s), and are sent again as ticket {} (attempt {})",
                                    which, reason, commit.fragments.size(), merged, commit.ticket, commit.attempts + 1);
}

void SyncerCore::credit(std::map<std::string, LearnerRecord>& learners, const StagedCommit& commit,
                        double now_s) const {
  for (const auto& staged : commit.fragments) {
    for (const auto& c : staged.merged) {
      auto it = learners.find(c.learner_id);
      if (it == learners.end()) continue;
      auto& r = it->second;
      const double share = fragment_share(c.fragment);
      r.contributions_merged += 1;
      r.step_equivalents_merged += c.steps * share;
      r.compute_merged_s += c.compute_s;
      r.tokens_merged += static_cast<int64_t>(c.tokens * share);
      if (c.fragment == 0) r.steps_merged_fragment0 += c.steps;
      r.last_staleness = c.staleness;
      // Only work sent after the (re)join counts: a dead incarnation's last updates may still merge.
      if (r.first_merge_after_join_s < 0 && c.arrived_s >= r.joined_s) r.first_merge_after_join_s = now_s;
    }
  }
}

nlohmann::json SyncerCore::accounting_json(const std::map<std::string, LearnerRecord>& learners_in) const {
  nlohmann::json learners = nlohmann::json::object();
  for (const auto& [id, r] : learners_in) learners[id] = learner_accounting(r);
  nlohmann::json schedule = nlohmann::json::array();
  for (const auto& e : schedule_.epochs()) schedule.push_back({{"from_step", e.from_step}, {"inner_steps", e.inner_steps}});
  return {{"learners", learners}, {"rejected", rejects_.by_reason}, {"claims_corrected", claims_corrected_},
          {"bytes_from_learners", bytes_from_learners}, {"bytes_to_learners", bytes_to_learners},
          {"schedule", schedule}};
}

std::vector<messages::InnerStepsFrom> SyncerCore::schedule_to_broadcast() const {
  std::vector<messages::InnerStepsFrom> epochs;
  if (schedule_.epochs().size() < 2) return epochs;  // unchanged: every learner has it from its configuration
  for (const auto& e : schedule_.epochs()) {
    epochs.push_back({static_cast<uint64_t>(e.from_step), static_cast<uint32_t>(e.inner_steps)});
  }
  return epochs;
}

void SyncerCore::restore_accounting(const nlohmann::json& a) {
  const nlohmann::json learners = a.value("learners", nlohmann::json::object());
  for (const auto& [id, j] : learners.items()) {
    auto& r = learners_[id];
    r.id = id;
    r.contributions_merged = j.value("contributions_merged", int64_t{0});
    r.contributions_rejected = j.value("contributions_rejected", int64_t{0});
    r.step_equivalents_merged = j.value("step_equivalents_merged", 0.0);
    r.step_equivalents_rejected = j.value("step_equivalents_rejected", 0.0);
    r.compute_merged_s = j.value("compute_merged_s", 0.0);
    r.compute_rejected_s = j.value("compute_rejected_s", 0.0);
    r.steps_merged_fragment0 = j.value("steps_merged_fragment0", int64_t{0});
    r.tokens_merged = j.value("tokens_merged", int64_t{0});
    r.joins = j.value("joins", int64_t{0});
    r.received_until = j.value("received_until", std::vector<uint64_t>{});
  }
  const nlohmann::json rejected = a.value("rejected", nlohmann::json::object());
  for (const auto& [reason, n] : rejected.items()) {
    rejects_.by_reason[reason] = n.get<int64_t>();
  }
  claims_corrected_ = a.value("claims_corrected", int64_t{0});
  bytes_from_learners = a.value("bytes_from_learners", int64_t{0});
  bytes_to_learners = a.value("bytes_to_learners", int64_t{0});
  // An operator's schedule changes survive a restart of the syncer or the coordinator.
  std::vector<ScheduleEpoch> epochs;
  for (const auto& e : a.value("schedule", nlohmann::json::array())) {
    epochs.push_back({e.value("from_step", int64_t{0}), e.value("inner_steps", 0)});
  }
  if (epochs.size() > 1) {
    auto schedule = FragmentSchedule::from_epochs(std::move(epochs), static_cast<int>(fragments_.size()),
                                                  diloco::staggered(mode_));
    if (schedule) {
      schedule_ = std::move(*schedule);
      options_.setup.run.inner_steps = schedule_.epochs().back().inner_steps;
    }
  }
}

nlohmann::json SyncerCore::status(double now_s) const {
  nlohmann::json learners = nlohmann::json::object();
  for (const auto& [id, r] : learners_) {
    learners[id] = learner_accounting(r);
    learners[id].update({{"active", r.active}, {"finished", r.finished}, {"joined_version", r.joined_version},
                         {"joined_s", r.joined_s}, {"first_merge_after_join_s", r.first_merge_after_join_s},
                         {"tokens_per_s", r.tokens_per_s}, {"staleness", r.last_staleness}});
  }
  int64_t pending = 0;
  std::vector<uint64_t> fragment_versions, open_rounds;
  for (const auto& f : fragments_) {
    pending += static_cast<int64_t>(f.pending.size());
    fragment_versions.push_back(f.version);
    open_rounds.push_back(f.next_round);
  }
  const std::vector<int> owned = options_.shard.owned(fragment_count());
  double owned_share = 0;
  for (int p : owned) owned_share += fragment_share(p);
  return {{"mode", diloco::mode_name(mode_)},
          {"shard", {{"index", options_.shard.index}, {"count", options_.shard.count}, {"fragments", owned},
                     {"share", options_.shard.count > 1 ? owned_share : 1.0}}},  // unsharded: exactly all
          {"outer_lr", rules_.lr},
          {"outer_momentum", rules_.momentum},
          {"quorum", options_.setup.outer.quorum},
          {"version", latest_version_},
          {"commits", commits_},
          {"failed_commits", failed_commits_},
          {"merged_contributions", merges_},
          {"commit_in_flight", commit_in_flight()},
          {"fragments_in_flight", in_flight_},
          {"pending", pending},
          {"active_learners", active_learners()},
          {"fragment_versions", fragment_versions},
          {"fragment_commits", fragment_commits_},
          {"open_rounds", open_rounds},
          {"downlink_codec", messages::codec_name(rules_.downlink)},
          {"uplink_codec", messages::codec_name(uplink_)},
          {"updates_by_codec", updates_by_codec},
          {"updates_by_period", updates_by_period},
          {"inner_steps", schedule_.epochs().back().inner_steps},
          {"outer_optimizer", rules_.delayed_nesterov ? "delayed_nesterov" : "nesterov"},
          {"train_loss", last_train_loss_},
          {"grace_s", grace_s()},
          {"timings", {{"step_s", timings_.step_s}, {"quorum_s", timings_.quorum_s}, {"sync_s", timings_.sync_s}}},
          {"rejected", rejects_.by_reason},
          {"rejected_total", rejects_.total()},
          {"claims_corrected", claims_corrected_},
          {"bytes_from_learners", bytes_from_learners},
          {"bytes_to_learners", bytes_to_learners},
          {"screening", screening_status()},
          {"pending_bytes", pending_bytes()},
          {"fold_s", fold_s_},
          {"learners", learners},
          {"accounting", accounting_json()}};
}

nlohmann::json SyncerCore::screening_status() const {
  static const char* const kModes[] = {"none", "clip", "refuse"};
  std::vector<double> medians;
  for (int p = 0; p < fragment_count(); ++p) medians.push_back(Screening::median(known_norms(p)));
  return {{"mode", kModes[static_cast<int>(screening_.mode)]}, {"clip", screening_.clip},
          {"refuse", screening_.refuse},
          {"clipped", clipped_}, {"refused", rejects_.by_reason.at(to_string(RejectReason::outlier))},
          {"held", held_}, {"unscreened", unscreened_},
          {"median_norm_per_lr", medians}, {"largest_passed_ratio", largest_passed_ratio_}};
}

int64_t SyncerCore::pending_bytes() const {
  int64_t bytes = 0;
  for (const auto& f : fragments_) {
    bytes += f.sum.bytes();
    for (const auto& c : f.pending) bytes += static_cast<int64_t>(c.delta.size() * sizeof(float) + c.encoded.size());
  }
  return bytes;
}

nlohmann::json SyncerCore::broadcast_digests() const {
  nlohmann::json out = nlohmann::json::array();
  for (int p = 0; p < fragment_count(); ++p) {
    const auto& f = fragments_[p];
    const auto hollow = hollow_.find(p);
    out.push_back({{"version", f.version},
                   {"digest", hollow != hollow_.end() ? hollow->second.digest : broadcast_digest(f.broadcast)},
                   {"outer_digest", hollow != hollow_.end() ? hollow->second.outer_digest : stored_outer_digest(f)},
                   {"arrivals", f.outer.arrivals}});
  }
  return out;
}

}  // namespace archipelago::actors
