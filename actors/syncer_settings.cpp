#include "actors/syncer_settings.hpp"

#include <algorithm>
#include <sstream>

#include "diloco/tunables.hpp"

namespace archipelago::actors {

SyncerSettings::SyncerSettings(RuntimeOptions options, int fragment_count)
    : options_(std::move(options)), mode_(options_.setup.run.mode), fragment_count_(fragment_count) {
  const auto& outer = options_.setup.outer;
  rules_.mode = mode_;
  if (auto rule = training::parse_merge_rule(outer.merge)) rules_.merge = *rule;
  rules_.lr = outer.lr;
  rules_.momentum = outer.momentum;
  rules_.momentum_warmup = outer.momentum_warmup;
  // The configuration refused an optimizer the mode would ignore (apps/config.cpp); a value built
  // past it gets the mode's default rule.
  auto rule = diloco::outer_rule(mode_, outer.optimizer);
  rules_.outer = rule ? *rule : *diloco::outer_rule(mode_, "auto");
  rules_.expected_learners = options_.setup.run.learners;
  rules_.inner_steps = options_.setup.run.inner_steps;
  rules_.delayed_every = outer.delayed_every;
  if (auto codec = messages::parse_codec(outer.downlink_codec)) rules_.downlink = *codec;
  if (auto codec = messages::parse_codec(outer.codec)) uplink_ = *codec;
  rules_.merge_threads = outer.merge_threads;
  if (auto mode = diloco::parse_screen_mode(outer.screen)) screening_.mode = *mode;
  screening_.clip = outer.screen_clip;
  screening_.refuse = outer.screen_refuse;
  screening_.probation = outer.screen_probation;
  schedule_ = diloco::FragmentSchedule(options_.setup.run.inner_steps, fragment_count_, diloco::staggered(mode_));
  tokens_per_step_ = configured_tokens_per_step(options_.setup);
}

std::vector<messages::InnerStepsFrom> SyncerSettings::schedule_to_broadcast() const {
  std::vector<messages::InnerStepsFrom> epochs;
  if (schedule_.epochs().size() < 2) return epochs;  // unchanged: every learner has it from its configuration
  for (const auto& e : schedule_.epochs()) {
    epochs.push_back({static_cast<uint64_t>(e.from_step), static_cast<uint32_t>(e.inner_steps)});
  }
  return epochs;
}

Expected<std::pair<std::string, std::string>> SyncerSettings::set(const std::string& key, const std::string& value,
                                                                  uint64_t leading_step) {
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
    const int old_h = schedule_.period_at(static_cast<int64_t>(leading_step));
    const int64_t from =
        std::max<int64_t>(static_cast<int64_t>(leading_step) + old_h, schedule_.epochs().back().from_step + 1);
    if (Status changed = schedule_.change(from, static_cast<int>(*number)); !changed) return changed.error();
    options_.setup.run.inner_steps = static_cast<int>(*number);
    rules_.inner_steps = static_cast<int64_t>(*number);  // a round of work from now on
    return std::pair<std::string, std::string>{std::to_string(old_h), text(*number) + " from step " + std::to_string(from)};
  }
  // A key of the table that no branch above applies: the table and this function disagree.
  return make_error(ErrorCode::inconsistent, "'" + key + "' is runtime-tunable, but the syncer does not apply it");
}

nlohmann::json SyncerSettings::schedule_json() const {
  nlohmann::json schedule = nlohmann::json::array();
  for (const auto& e : schedule_.epochs()) schedule.push_back({{"from_step", e.from_step}, {"inner_steps", e.inner_steps}});
  return schedule;
}

void SyncerSettings::restore_schedule(const nlohmann::json& epochs_json) {
  // An operator's schedule changes survive a restart of the syncer or the coordinator.
  std::vector<diloco::ScheduleEpoch> epochs;
  for (const auto& e : epochs_json) epochs.push_back({e.value("from_step", int64_t{0}), e.value("inner_steps", 0)});
  if (epochs.size() < 2) return;
  auto schedule = diloco::FragmentSchedule::from_epochs(std::move(epochs), fragment_count_, diloco::staggered(mode_));
  if (!schedule) return;
  schedule_ = std::move(*schedule);
  options_.setup.run.inner_steps = schedule_.epochs().back().inner_steps;
  rules_.inner_steps = options_.setup.run.inner_steps;
}

}  // namespace archipelago::actors
