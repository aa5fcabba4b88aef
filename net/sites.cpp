// Parsing and validation of [sites] and [links]. See sites.hpp for the format and the contract.
#include "net/sites.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <set>
#include <sstream>

#include <toml++/toml.h>

namespace archipelago::net {

namespace {

bool is_bare_key(std::string_view key) {
  return !key.empty() && std::all_of(key.begin(), key.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
  });
}

// A key path as it would be written in TOML: sites.hub, links."a b".latency_ms.
std::string key_path(std::initializer_list<std::string_view> parts) {
  std::string path;
  for (std::string_view part : parts) {
    if (!path.empty()) path += '.';
    path += is_bare_key(part) ? std::string(part) : "\"" + std::string(part) + "\"";
  }
  return path;
}

Error error_at(std::string_view origin, const toml::node& node, const std::string& key, const std::string& what) {
  return make_error(ErrorCode::invalid_argument, std::string(origin) + ":" +
                                                     std::to_string(node.source().begin.line) + ": " + key +
                                                     ": " + what);
}

Status check_address(std::string_view address) {
  const auto colon = address.rfind(':');
  if (colon == std::string_view::npos || colon == 0 || colon + 1 == address.size())
    return make_error(ErrorCode::invalid_argument, "expected \"host:port\", got \"" + std::string(address) + "\"");
  const std::string_view port = address.substr(colon + 1);
  if (port.size() > 5 || !std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; }) ||
      std::stoi(std::string(port)) < 1 || std::stoi(std::string(port)) > 65535)
    return make_error(ErrorCode::invalid_argument, "port must be 1..65535, got \"" + std::string(port) + "\"");
  return Status::success();
}

Expected<Site> parse_site(std::string_view origin, const std::string& name, const toml::node& node) {
  const std::string path = key_path({"sites", name});
  const toml::table* table = node.as_table();
  if (!table) return error_at(origin, node, path, "must be a table ([" + path + "])");
  Site site{name, SiteRole::node, ""};
  for (auto&& [key, value] : *table) {
    const std::string field = key_path({"sites", name, key.str()});
    if (key == "role") {
      const auto role = value.value_exact<std::string>();
      if (role == "coordinator") site.role = SiteRole::coordinator;
      else if (role == "node") site.role = SiteRole::node;
      else return error_at(origin, value, field, "must be \"coordinator\" or \"node\"");
    } else if (key == "address") {
      const auto address = value.value_exact<std::string>();
      if (!address) return error_at(origin, value, field, "must be a string \"host:port\"");
      if (auto ok = check_address(*address); !ok) return error_at(origin, value, field, ok.error().reason);
      site.address = *address;
    } else {
      return error_at(origin, value, field, "unknown key (known: role, address)");
    }
  }
  return site;
}

// Splits "<from>-<to>" where both halves are declared sites; exactly one split may match.
Expected<std::pair<std::string, std::string>> split_link_key(std::string_view origin, const toml::node& node,
                                                             const std::string& key,
                                                             const std::set<std::string, std::less<>>& names) {
  const std::string path = key_path({"links", key});
  std::vector<std::pair<std::string, std::string>> matches;
  for (std::size_t dash = key.find('-'); dash != std::string::npos; dash = key.find('-', dash + 1)) {
    std::string from = key.substr(0, dash), to = key.substr(dash + 1);
    if (names.count(from) && names.count(to)) matches.emplace_back(std::move(from), std::move(to));
  }
  if (matches.empty())
    return error_at(origin, node, path, "not of the form \"<from>-<to>\" with both sites declared in [sites]");
  if (matches.size() > 1)
    return error_at(origin, node, path, "ambiguous: splits as \"" + matches[0].first + "\"-\"" + matches[0].second +
                                            "\" and \"" + matches[1].first + "\"-\"" + matches[1].second + "\"");
  if (matches[0].first == matches[0].second)
    return error_at(origin, node, path, "a link must join two different sites");
  return matches[0];
}

Expected<LinkSpec> parse_link(std::string_view origin, const std::string& name, const toml::node& node) {
  const toml::table* table = node.as_table();
  if (!table) return error_at(origin, node, key_path({"links", name}), "must be a table");
  LinkSpec spec;
  for (auto&& [key, value] : *table) {
    const std::string field = key_path({"links", name, key.str()});
    if (key != "bandwidth_mbit" && key != "latency_ms")
      return error_at(origin, value, field, "unknown key (known: bandwidth_mbit, latency_ms)");
    if (!value.is_number()) return error_at(origin, value, field, "must be a number");
    const double number = *value.value<double>();
    if (!std::isfinite(number)) return error_at(origin, value, field, "must be finite");
    if (key == "bandwidth_mbit") {
      if (number <= 0) return error_at(origin, value, field, "must be > 0 (omit it for an unlimited link)");
      spec.bandwidth_bits_per_s = number * 1e6;
    } else {
      if (number < 0) return error_at(origin, value, field, "must be >= 0");
      spec.latency_s = number / 1e3;
    }
  }
  return spec;
}

}  // namespace

const Site* SiteTopology::find(std::string_view name) const {
  for (const auto& site : sites_)
    if (site.name == name) return &site;
  return nullptr;
}

const Site* SiteTopology::coordinator() const {
  for (const auto& site : sites_)
    if (site.role == SiteRole::coordinator) return &site;
  return nullptr;
}

LinkSpec SiteTopology::link(std::string_view from, std::string_view to) const {
  auto it = links_.find({std::string(from), std::string(to)});
  return it == links_.end() ? LinkSpec{} : it->second;
}

Expected<SiteTopology> parse_sites(std::string_view toml_text, std::string_view origin) {
  toml::table root;
  try {
    root = toml::parse(toml_text, origin);
  } catch (const toml::parse_error& e) {
    std::ostringstream reason;
    reason << origin << ":" << e.source().begin.line << ": " << e.description();
    return make_error(ErrorCode::invalid_argument, reason.str());
  }

  SiteTopology topology;
  const toml::node* sites_node = root.get("sites");
  if (!sites_node) return make_error(ErrorCode::invalid_argument, std::string(origin) + ": no [sites] table");
  const toml::table* sites = sites_node->as_table();
  if (!sites || sites->empty())
    return error_at(origin, *sites_node, "sites", "must be a table with one sub-table per site");
  std::set<std::string, std::less<>> names;
  for (auto&& [key, value] : *sites) {
    const std::string name(key.str());
    auto site = parse_site(origin, name, value);
    if (!site) return site.error();
    if (site->role == SiteRole::coordinator && topology.coordinator())
      return error_at(origin, value, key_path({"sites", name, "role"}),
                      "a second coordinator (\"" + topology.coordinator()->name + "\" is one already)");
    names.insert(name);
    topology.sites_.push_back(std::move(*site));
  }
  std::sort(topology.sites_.begin(), topology.sites_.end(),
            [](const Site& a, const Site& b) { return a.name < b.name; });

  if (const toml::node* links_node = root.get("links")) {
    const toml::table* links = links_node->as_table();
    if (!links) return error_at(origin, *links_node, "links", "must be a table of \"<from>-<to>\" tables");
    std::map<std::pair<std::string, std::string>, LinkSpec> given;
    for (auto&& [key, value] : *links) {
      const std::string name(key.str());
      auto ends = split_link_key(origin, value, name, names);
      if (!ends) return ends.error();
      auto spec = parse_link(origin, name, value);
      if (!spec) return spec.error();
      given[*ends] = *spec;  // distinct keys always name distinct (from, to) pairs
    }
    topology.links_ = given;
    for (const auto& [ends, spec] : given) topology.links_.emplace(std::make_pair(ends.second, ends.first), spec);
  }
  return topology;
}

Expected<SiteTopology> load_sites_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error(ErrorCode::not_found, "cannot open sites file " + path);
  std::ostringstream text;
  text << in.rdbuf();
  return parse_sites(std::string_view(text.str()), std::string_view(path));
}

}  // namespace archipelago::net
