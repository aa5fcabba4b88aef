// The console's prompt shows answers as a person reads them: tables, units, times, hex digests.
#include <cstdlib>
#include <ctime>

#include <doctest/doctest.h>

#include "apps/console_format.hpp"

using archipelago::apps::format_answer;
using archipelago::apps::format_value;

TEST_CASE("console values read as what they measure") {
  // Times are the console's local time: a zone two hours east of UTC, named XYZ (POSIX TZ).
  const char* tz = std::getenv("TZ");
  const std::string saved = tz ? tz : "";
  setenv("TZ", "XYZ-2", 1);
  tzset();
  CHECK(format_value("committed_unix_ms", int64_t{1764912093000}) == "2025-12-05 07:21:33 XYZ");
  CHECK(format_value("started_unix_s", 1764912093.5) == "2025-12-05 07:21:33 XYZ");
  setenv("TZ", "UTC0", 1);
  tzset();
  CHECK(format_value("committed_unix_ms", int64_t{1764912093000}) == "2025-12-05 05:21:33 UTC");
  if (tz) setenv("TZ", saved.c_str(), 1);
  else unsetenv("TZ");
  tzset();

  CHECK(format_value("heartbeat_age_s", 0.14283148599952256) == "0.14 s");
  CHECK(format_value("uptime_s", 152.73) == "152.7 s");
  CHECK(format_value("tokens_per_s", 21971.550405426286) == "21972");
  CHECK(format_value("digest", uint64_t{18364758544493064720ull}) == "fedcba987654");
  CHECK(format_value("goodput", 0.96412345) == "0.9641");
  CHECK(format_value("bytes_up", 46912345.0) == "46.9 MB");
  CHECK(format_value("bytes_down", int64_t{46912345}) == "46.9 MB");  // whole counts too
  CHECK(format_value("bytes_sent", 512) == "512 B");
  CHECK(format_value("bytes_links_total", 1234567890123.0) == "1.23 TB");
  CHECK(format_value("heartbeat_bytes", 4096) == "4.10 kB");
  CHECK(format_value("cross_site_bytes_per_token", 3.25) == "3.25");  // a ratio, not a size
  CHECK(format_value("version", 42) == "42");
  CHECK(format_value("heldout_loss", nullptr) == "\u2014");
  CHECK(format_value("active", true) == "yes");
  CHECK(format_value("fragment_versions", nlohmann::json::array({3, 5})) == "[3 5]");
  CHECK(format_value("failed", "") == "\u2014");
  // Nested values are read by their own keys.
  CHECK(format_value("entry", {{"ok", true}, {"wait_s", 0.123456}, {"command", {{"verb", "pin"}}}}) ==
        "{command {verb pin}, ok yes, wait_s 0.12 s}");
}

TEST_CASE("an answer with rows is a table, its other keys are lines") {
  nlohmann::json answer = {
      {"latest", 7},
      {"versions", {{{"version", 6}, {"digest", uint64_t{0x1234567890abcdefull}}, {"pinned", false}},
                    {{"version", 7}, {"digest", uint64_t{0x00ff00ff00ff00ffull}}, {"pinned", true}}}}};
  const std::string text = format_answer(answer);
  CHECK(text == "latest: 7\n"
                "\n"
                "versions\n"
                "version  digest        pinned\n"
                "6        1234567890ab  no\n"
                "7        00ff00ff00ff  yes\n");
  // A sharded run's answers: one heading per shard, then that shard's answer.
  nlohmann::json sharded = {{"shards", {{{"shard", 0}, {"target", "h:1"}, {"answer", {{"committed_version", 9}}}},
                                        {{"shard", 1}, {"target", "h:2"}, {"answer", {{"committed_version", 4}}}}}}};
  CHECK(format_answer(sharded) == "== shard 0 (h:1)\ncommitted_version: 9\n\n== shard 1 (h:2)\ncommitted_version: 4\n");
}
