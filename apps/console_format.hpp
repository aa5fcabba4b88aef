// How the console shows an answer at its prompt: tables a person can read, not JSON. `--json` (and
// every script) gets the answer's JSON as it came; this is only what the prompt prints.
//
//   - an array of objects (learners, nodes, versions, events, audit) is a table: one row each, the
//     columns that name the row first (id, learner, node, ..., version), then the others
//     alphabetically, nested values as compact JSON; a sharded run's answers, one per shard;
//   - the other keys are `key: value` lines;
//   - values read as what they measure: seconds as "0.14 s", throughputs whole, byte counts in SI
//     units ("46.9 MB"), epoch times as the console's local time with its zone, digests as their
//     first 12 hex digits, other numbers to 4 significant digits, null as "—".
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace archipelago::apps {

// One value of `key`, as the prompt shows it.
std::string format_value(const std::string& key, const nlohmann::json& value);

// A whole answer, ready to print (ends with a newline).
std::string format_answer(const nlohmann::json& answer);

}  // namespace archipelago::apps
