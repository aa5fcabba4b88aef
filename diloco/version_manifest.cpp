#include "diloco/version_manifest.hpp"

#include <algorithm>
#include <cmath>

namespace archipelago::diloco {
namespace {

using json = nlohmann::json;

// `where`: "" for a top-level key, "contributors: " inside a contribution.
Error wrong_type(const char* key, const char* expected, const char* where = "") {
  return Error{ErrorCode::corrupt, std::string("manifest: ") + where + "'" + key + "' is not " + expected};
}

// Reads `key` of `object` into `out` when present; a present key of another type is an error.
template <typename T>
Status read(const json& object, const char* key, T& out, const char* expected, const char* where = "") {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return Status::success();
  try {
    out = it->get<T>();
  } catch (const json::exception&) {
    return wrong_type(key, expected, where);
  }
  return Status::success();
}

json to_json(const Contribution& c) {
  return {{"learner", c.learner}, {"fragment", c.fragment}, {"base", c.base}, {"share", c.share},
          {"round", c.round}, {"on_time", c.on_time}, {"staleness", c.staleness}, {"steps", c.steps},
          {"tokens", c.tokens}, {"train_loss", c.train_loss}};
}

Expected<Contribution> contribution_of(const json& j) {
  if (!j.is_object()) return wrong_type("contributors", "a list of objects");
  Contribution c;
  const char* in = "contributors: ";
  for (Status s : {read(j, "learner", c.learner, "a learner id", in), read(j, "fragment", c.fragment, "a fragment index", in),
                   read(j, "base", c.base, "a version", in), read(j, "share", c.share, "a number", in),
                   read(j, "round", c.round, "a round", in), read(j, "on_time", c.on_time, "true or false", in),
                   read(j, "staleness", c.staleness, "a whole number", in), read(j, "steps", c.steps, "a whole number", in),
                   read(j, "tokens", c.tokens, "a whole number", in), read(j, "train_loss", c.train_loss, "a number", in)}) {
    if (!s) return s.error();
  }
  return c;
}

}  // namespace

bool Contribution::operator==(const Contribution& o) const {
  return learner == o.learner && fragment == o.fragment && base == o.base && share == o.share && round == o.round &&
         on_time == o.on_time && staleness == o.staleness && steps == o.steps && tokens == o.tokens &&
         (train_loss == o.train_loss || (std::isnan(train_loss) && std::isnan(o.train_loss)));
}

uint64_t VersionManifest::version_of(int fragment) const {
  return fragment >= 0 && static_cast<size_t>(fragment) < fragment_versions.size() ? fragment_versions[fragment] : version;
}

std::string VersionManifest::encode() const {
  json norms = json::array();
  for (const auto& known : screening_norms) norms.push_back(known);
  json j = {{"version", version}, {"mode", mode_name(mode)}, {"fragments", fragments}, {"carried", carried},
            {"fragment_versions", fragment_versions}, {"outer_state", outer_state}, {"accounting", accounting},
            {"screening_norms", norms}, {"bytes_from_learners", bytes_from_learners},
            {"bytes_to_learners", bytes_to_learners}};
  if (initial) {
    j["kind"] = "initial";
  } else {
    json list = json::array();
    for (const auto& c : contributors) list.push_back(to_json(c));
    j["contributors"] = list;
  }
  return j.dump();
}

Expected<VersionManifest> VersionManifest::decode(std::string_view text) {
  const json j = json::parse(text.begin(), text.end(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) return Error{ErrorCode::corrupt, "manifest: not a JSON object"};
  VersionManifest m;
  std::string mode = mode_name(m.mode), kind;
  for (Status s : {read(j, "version", m.version, "a version"), read(j, "mode", mode, "a mode name"),
                   read(j, "kind", kind, "a string"), read(j, "fragments", m.fragments, "a list of fragment indices"),
                   read(j, "carried", m.carried, "a list of fragment indices"),
                   read(j, "fragment_versions", m.fragment_versions, "a list of versions"),
                   read(j, "bytes_from_learners", m.bytes_from_learners, "a whole number"),
                   read(j, "bytes_to_learners", m.bytes_to_learners, "a whole number")}) {
    if (!s) return s.error();
  }
  auto parsed_mode = parse_mode(mode);
  if (!parsed_mode) return Error{ErrorCode::corrupt, "manifest: 'mode': " + parsed_mode.error().reason};
  m.mode = *parsed_mode;
  m.initial = kind == "initial";
  if (auto it = j.find("outer_state"); it != j.end()) {
    if (!it->is_array()) return wrong_type("outer_state", "a list");
    m.outer_state = *it;
  }
  if (auto it = j.find("accounting"); it != j.end()) {
    if (!it->is_object()) return wrong_type("accounting", "an object");
    m.accounting = *it;
  }
  if (auto it = j.find("contributors"); it != j.end()) {
    if (!it->is_array()) return wrong_type("contributors", "a list of objects");
    for (const auto& c : *it) {
      auto contribution = contribution_of(c);
      if (!contribution) return contribution.error();
      m.contributors.push_back(std::move(*contribution));
    }
  }
  if (auto it = j.find("screening_norms"); it != j.end()) {
    if (!it->is_array()) return wrong_type("screening_norms", "a list");
    for (const auto& known : *it) {
      std::map<std::string, double> norms;
      if (known.is_object()) {  // a fragment with no known norm is written as null
        for (const auto& [learner, v] : known.items()) {
          if (!v.is_number()) return wrong_type("screening_norms", "a list of learner -> number maps");
          norms[learner] = v.get<double>();
        }
      }
      m.screening_norms.push_back(std::move(norms));
    }
  }
  for (int p : m.fragments) {
    if (std::find(m.carried.begin(), m.carried.end(), p) != m.carried.end()) {
      return Error{ErrorCode::inconsistent, "manifest: fragment " + std::to_string(p) + " is both changed and carried"};
    }
  }
  for (uint64_t v : m.fragment_versions) {
    if (v > m.version) {
      return Error{ErrorCode::inconsistent, "manifest: a fragment version " + std::to_string(v) + " is above version " +
                                                std::to_string(m.version)};
    }
  }
  return m;
}

}  // namespace archipelago::diloco
