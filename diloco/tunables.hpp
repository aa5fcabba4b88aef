// The keys an operator may `set` on a live run, each under its one name: the configuration file's
// (config/default.toml). One table says what each key takes and within which bounds, so that the
// console's `set outer.grace_max_s 100` and the start's `--set outer.grace_max_s=100` are refused
// for the same reason.
//
// Invariant: a key is tunable if and only if it is in the table; every table key is a key of
// config/default.toml; a value the table accepts is one the configuration accepts at start. Names
// a key had before (`syncer.grace_max_s`) are refused with the one name.
//
// Who calls it: the syncer's `set` (actors/syncer_settings.cpp) looks a key up and checks its value
// before applying it; the configuration (apps/config.cpp) checks the same keys' bounds; the console
// lists the names in its help. Pure; any thread.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/error.hpp"

namespace archipelago::diloco {

// What a key's value is.
enum class TunableKind {
  real,   // a finite number
  whole,  // a whole number
  codec,  // a codec name, one of the key's `choices`
};

// "a real number", "a whole number", "a codec name".
const char* kind_name(TunableKind kind);

struct Tunable {
  std::string key;  // the configuration file's name, e.g. "outer.grace_max_s"
  TunableKind kind = TunableKind::real;
  // real and whole: the bounds, inclusive unless marked open (outer.lr > 0, outer.momentum < 1).
  double min = 0;
  double max = 0;
  bool min_open = false;
  bool max_open = false;
  // The upper bound is the run's learner count, given at check time (outer.quorum), not `max`.
  bool max_is_learners = false;
  // codec: the names accepted.
  std::vector<std::string> choices;
  std::string help;  // one line: what changes, and from when
};

// Every tunable key, in the order help texts and error messages list them.
const std::vector<Tunable>& tunables();
// The key named `key`; nullptr when it is not tunable.
const Tunable* find_tunable(std::string_view key);
// "outer.lr, outer.momentum, ...": every key, comma-separated.
std::string tunable_names();
// The one name of a key that had another before ("syncer.grace_max_s" -> "outer.grace_max_s");
// nullptr for every other string.
const char* renamed_tunable(std::string_view old_name);
// The key named `key`, or invalid_argument: "'syncer.grace_max_s' is called 'outer.grace_max_s'"
// for an old name, "'model.preset' is not runtime-tunable (<every name>)" otherwise.
Expected<const Tunable*> lookup_tunable(std::string_view key);

// What a value may be, as an error message says it: "(0, 10]", "[1, 4]" (outer.quorum with
// `learners` = 4), "fp32, bf16, int8, int4".
std::string tunable_range(const Tunable& tunable, int learners);

// Ok when `value` is within the key's bounds (and whole for a whole key); invalid_argument
// "outer.grace_max_s must be in [0, 60], not 100" otherwise. `learners` is the run's learner count
// (outer.quorum's upper bound; ignored by the other keys). For values already typed (the config).
Status check_tunable_value(const Tunable& tunable, double value, int learners);
// Parses `text` as a number and checks it as above (the message quotes `text` as given);
// invalid_argument "outer.lr: 'abc' is not a finite number" when it is not one; invalid_argument
// too when the key takes a codec name.
Expected<double> check_tunable_number(const Tunable& tunable, std::string_view text, int learners);
// Ok when `text` is one of a codec key's names; invalid_argument naming the key and its names
// otherwise, or when the key takes a number.
Status check_tunable_choice(const Tunable& tunable, std::string_view text);

}  // namespace archipelago::diloco
