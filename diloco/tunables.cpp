#include "diloco/tunables.hpp"

#include <cmath>
#include <cstdlib>
#include <sstream>
#include <utility>

namespace archipelago::diloco {
namespace {

Tunable number(std::string key, TunableKind kind, double min, double max, std::string help) {
  Tunable t;
  t.key = std::move(key);
  t.kind = kind;
  t.min = min;
  t.max = max;
  t.help = std::move(help);
  return t;
}

Tunable codec(std::string key, std::string help) {
  Tunable t;
  t.key = std::move(key);
  t.kind = TunableKind::codec;
  t.choices = {"fp32", "bf16", "int8", "int4"};  // config/default.toml; "int4" is the integer grid
  t.help = std::move(help);
  return t;
}

std::vector<Tunable> make_table() {
  std::vector<Tunable> table;
  Tunable lr = number("outer.lr", TunableKind::real, 0, 10, "outer learning rate, from the next merge");
  lr.min_open = true;  // 0 would leave the global model where it is
  table.push_back(lr);
  Tunable momentum = number("outer.momentum", TunableKind::real, 0, 1, "outer Nesterov momentum, from the next merge");
  momentum.max_open = true;  // 1 never forgets a step
  table.push_back(momentum);
  Tunable quorum = number("outer.quorum", TunableKind::whole, 1, 0,
                          "K: minimum learners merged per fragment, from the next merge; at most the run's learners");
  quorum.max_is_learners = true;
  table.push_back(quorum);
  table.push_back(codec("outer.codec", "uplink codec: learners encode their next updates with it"));
  table.push_back(codec("outer.downlink_codec", "downlink codec of the next broadcasts"));
  table.push_back(number("outer.grace_max_s", TunableKind::real, 0, 60, "upper bound of the grace window in seconds"));
  table.push_back(number("outer.grace_gamma", TunableKind::real, 0, 10, "gamma of the grace window"));
  table.push_back(number("outer.max_staleness", TunableKind::whole, 0, 1000,
                         "updates of a fragment committed since a learner's base, at most (else stale)"));
  table.push_back(number("train.inner_steps", TunableKind::whole, 1, 100000,
                         "H, from one period past the leading learner's last update; sync and ddp runs refuse it"));
  return table;
}

// Names the keys had before they took the configuration's.
const std::vector<std::pair<std::string, std::string>>& renames() {
  static const std::vector<std::pair<std::string, std::string>> table{
      {"syncer.grace_max_s", "outer.grace_max_s"},
      {"syncer.grace_gamma", "outer.grace_gamma"},
      {"syncer.max_staleness", "outer.max_staleness"},
  };
  return table;
}

std::string text_of(double value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

std::string choices_of(const Tunable& tunable) {
  std::string out;
  for (const std::string& choice : tunable.choices) out += (out.empty() ? "" : ", ") + choice;
  return out;
}

double max_of(const Tunable& tunable, int learners) { return tunable.max_is_learners ? learners : tunable.max; }

// `shown` is the value as the caller had it: the operator's text, or the config's number.
Status check_value(const Tunable& tunable, double value, const std::string& shown, int learners) {
  const double max = max_of(tunable, learners);
  const bool above_min = tunable.min_open ? value > tunable.min : value >= tunable.min;
  const bool below_max = tunable.max_open ? value < max : value <= max;
  const bool whole = tunable.kind != TunableKind::whole || value == std::floor(value);
  if (above_min && below_max && whole) return Status::success();
  const char* what = tunable.kind == TunableKind::whole ? " must be a whole number in " : " must be in ";
  return make_error(ErrorCode::invalid_argument,
                    tunable.key + what + tunable_range(tunable, learners) + ", not " + shown);
}

Error takes_a_codec(const Tunable& tunable) {
  return make_error(ErrorCode::invalid_argument, tunable.key + " takes a codec name (" + choices_of(tunable) + ")");
}

}  // namespace

const char* kind_name(TunableKind kind) {
  switch (kind) {
    case TunableKind::real: return "a real number";
    case TunableKind::whole: return "a whole number";
    case TunableKind::codec: return "a codec name";
  }
  return "?";
}

const std::vector<Tunable>& tunables() {
  static const std::vector<Tunable> table = make_table();
  return table;
}

const Tunable* find_tunable(std::string_view key) {
  for (const Tunable& t : tunables()) {
    if (t.key == key) return &t;
  }
  return nullptr;
}

std::string tunable_names() {
  std::string out;
  for (const Tunable& t : tunables()) out += (out.empty() ? "" : ", ") + t.key;
  return out;
}

const char* renamed_tunable(std::string_view old_name) {
  for (const auto& [old, now] : renames()) {
    if (old == old_name) return now.c_str();
  }
  return nullptr;
}

Expected<const Tunable*> lookup_tunable(std::string_view key) {
  if (const Tunable* t = find_tunable(key)) return t;
  const std::string quoted = "'" + std::string(key) + "'";
  if (const char* now = renamed_tunable(key)) {
    return make_error(ErrorCode::invalid_argument, quoted + " is called '" + now + "'");
  }
  return make_error(ErrorCode::invalid_argument, quoted + " is not runtime-tunable (" + tunable_names() + ")");
}

std::string tunable_range(const Tunable& tunable, int learners) {
  if (tunable.kind == TunableKind::codec) return choices_of(tunable);
  return std::string(tunable.min_open ? "(" : "[") + text_of(tunable.min) + ", " + text_of(max_of(tunable, learners)) +
         (tunable.max_open ? ")" : "]");
}

Status check_tunable_value(const Tunable& tunable, double value, int learners) {
  if (tunable.kind == TunableKind::codec) return takes_a_codec(tunable);
  return check_value(tunable, value, text_of(value), learners);
}

Expected<double> check_tunable_number(const Tunable& tunable, std::string_view text, int learners) {
  if (tunable.kind == TunableKind::codec) return takes_a_codec(tunable);
  const std::string value(text);
  char* end = nullptr;
  const double number = std::strtod(value.c_str(), &end);
  if (value.empty() || end != value.c_str() + value.size() || !std::isfinite(number)) {
    return make_error(ErrorCode::invalid_argument, tunable.key + ": '" + value + "' is not a finite number");
  }
  if (Status ok = check_value(tunable, number, value, learners); !ok) return ok.error();
  return number;
}

Status check_tunable_choice(const Tunable& tunable, std::string_view text) {
  for (const std::string& choice : tunable.choices) {
    if (choice == text) return Status::success();
  }
  if (tunable.kind != TunableKind::codec) {
    return make_error(ErrorCode::invalid_argument, tunable.key + " takes " + kind_name(tunable.kind) + ", not a name");
  }
  return make_error(ErrorCode::invalid_argument,
                    tunable.key + " must be one of " + choices_of(tunable) + ", not '" + std::string(text) + "'");
}

}  // namespace archipelago::diloco
