// Sites and the emulated links between them, read from the `[sites]` and `[links]` tables of a TOML
// file (see config/sites/three-sites.toml):
//
//   [sites.hub]               # one table per site; the key is the site's name
//   role = "coordinator"      # coordinator | node (default node); at most one coordinator
//   address = "10.77.0.1:4242"  # optional host:port the site's process listens on
//   [links."hub-east"]        # "<from>-<to>"; site names may contain '-' (the split must be unique)
//   bandwidth_mbit = 100      # > 0; omitted: unlimited
//   latency_ms = 25           # >= 0; omitted: 0
//
// A link applies in both directions unless the reverse key ("east-hub") is also given, in which case
// each key describes its own direction. Pairs with no link, and a site to itself, are unlimited.
// Other top-level tables are ignored so this can read a section of a larger config; inside `sites`
// and `links` every unknown key or wrong type is an error that names the key.
//
// Invariant: a SiteTopology only exists fully validated. Thread-safety: an immutable value after
// parsing; share it read-only between threads.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/error.hpp"
#include "net/link_shaper.hpp"

namespace archipelago::net {

enum class SiteRole { coordinator, node };

struct Site {
  std::string name;
  SiteRole role = SiteRole::node;
  std::string address;  // "host:port", or empty when not given
};

class SiteTopology {
 public:
  // The sites in name order.
  const std::vector<Site>& sites() const { return sites_; }
  const Site* find(std::string_view name) const;
  const Site* coordinator() const;  // nullptr when no site has role = "coordinator"

  // The link from `from` to `to`; unlimited (LinkSpec{}) when none is configured.
  LinkSpec link(std::string_view from, std::string_view to) const;

 private:
  friend Expected<SiteTopology> parse_sites(std::string_view toml_text, std::string_view origin);
  std::vector<Site> sites_;
  std::map<std::pair<std::string, std::string>, LinkSpec> links_;  // (from, to) → spec, both directions stored
};

// `origin` names the text in error messages (usually the file path).
Expected<SiteTopology> parse_sites(std::string_view toml_text, std::string_view origin);
Expected<SiteTopology> load_sites_file(const std::string& path);

}  // namespace archipelago::net
