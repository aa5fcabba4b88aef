#include "apps/console_format.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <sstream>
#include <vector>

namespace archipelago::apps {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string printf_string(const char* format, double v) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, format, v);
  return buffer;
}

// The console's local time (TZ), with its zone's name.
std::string local_time(int64_t unix_ms) {
  const std::time_t seconds = static_cast<std::time_t>(unix_ms / 1000);
  std::tm tm{};
  localtime_r(&seconds, &tm);
  char buffer[48];
  std::strftime(buffer, sizeof buffer, "%Y-%m-%d %H:%M:%S %Z", &tm);
  return buffer;
}

// A byte count in SI units, three significant digits (whole bytes below 1 kB).
std::string byte_size(double bytes) {
  const double a = std::fabs(bytes);
  if (a < 1e3) return printf_string("%.0f B", bytes);
  static const char* kUnits[] = {"kB", "MB", "GB", "TB"};
  int unit = 0;
  double scaled = bytes / 1e3;
  while (std::fabs(scaled) >= 1e3 && unit < 3) {
    scaled /= 1e3;
    unit += 1;
  }
  return printf_string(std::fabs(scaled) >= 100 ? "%.0f" : std::fabs(scaled) >= 10 ? "%.1f" : "%.2f", scaled) + " " +
         kUnits[unit];
}

// Display width of UTF-8 text (one column per code point: the table's own characters are such).
size_t width(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

bool is_table(const nlohmann::json& value) {
  if (!value.is_array() || value.empty()) return false;
  for (const auto& row : value) {
    if (!row.is_object()) return false;
  }
  return true;
}

// Columns that say which row it is come first, in this order; the rest follow alphabetically.
int column_rank(const std::string& key) {
  static const std::vector<std::string> kFirst = {"id",   "learner", "node",     "name",  "site",  "version",
                                                  "sequence", "unix_ms", "kind", "subject", "state", "phase"};
  auto it = std::find(kFirst.begin(), kFirst.end(), key);
  return it == kFirst.end() ? static_cast<int>(kFirst.size()) : static_cast<int>(it - kFirst.begin());
}

std::string table(const nlohmann::json& rows) {
  std::vector<std::string> columns;
  for (const auto& row : rows) {
    for (const auto& [key, _] : row.items()) {
      if (std::find(columns.begin(), columns.end(), key) == columns.end()) columns.push_back(key);
    }
  }
  std::stable_sort(columns.begin(), columns.end(),
                   [](const std::string& a, const std::string& b) { return column_rank(a) < column_rank(b); });
  std::vector<std::vector<std::string>> cells;
  std::vector<size_t> widths;
  for (const auto& c : columns) widths.push_back(width(c));
  for (const auto& row : rows) {
    std::vector<std::string> line;
    for (size_t i = 0; i < columns.size(); ++i) {
      const auto it = row.find(columns[i]);
      line.push_back(it == row.end() ? "" : format_value(columns[i], *it));
      widths[i] = std::max(widths[i], width(line.back()));
    }
    cells.push_back(std::move(line));
  }
  std::ostringstream out;
  auto put = [&](const std::vector<std::string>& line) {
    for (size_t i = 0; i < line.size(); ++i) {
      out << line[i];
      if (i + 1 < line.size()) out << std::string(widths[i] - width(line[i]) + 2, ' ');
    }
    out << "\n";
  };
  put(columns);
  for (const auto& line : cells) put(line);
  return out.str();
}

}  // namespace

std::string format_value(const std::string& key, const nlohmann::json& value) {
  if (value.is_null()) return "\u2014";
  if (value.is_boolean()) return value.get<bool>() ? "yes" : "no";
  if (value.is_string()) return value.get<std::string>().empty() ? "\u2014" : value.get<std::string>();
  if (value.is_number()) {
    const double v = value.get<double>();
    if (!std::isfinite(v)) return "\u2014";
    if (key.find("digest") != std::string::npos && value.is_number_unsigned()) {
      // The first 12 of its 16 hex digits, as short commit ids are shown (`--json` has it whole).
      char buffer[24];
      std::snprintf(buffer, sizeof buffer, "%016llx", static_cast<unsigned long long>(value.get<uint64_t>()));
      return std::string(buffer, 12);
    }
    if (ends_with(key, "unix_ms")) return local_time(value.get<int64_t>());
    if (ends_with(key, "unix_s")) return local_time(static_cast<int64_t>(v * 1000));
    if (key.find("bytes_per") != std::string::npos) return printf_string(std::fabs(v) >= 1000 ? "%.0f" : "%.4g", v);
    if (ends_with(key, "_per_s")) return printf_string("%.0f", v);
    if (ends_with(key, "_s") || key == "s") return printf_string(std::fabs(v) < 10 ? "%.2f s" : "%.1f s", v);
    if (key.find("bytes") != std::string::npos) return byte_size(v);
    if (value.is_number_integer() || value.is_number_unsigned()) return value.dump();
    return printf_string(std::fabs(v) >= 1000 ? "%.0f" : "%.4g", v);
  }
  if (value.is_array()) {
    std::string out;
    for (const auto& v : value) out += (out.empty() ? "" : " ") + format_value(key, v);
    return "[" + out + "]";
  }
  std::string out;  // an object: each value read by its own key
  for (const auto& [k, v] : value.items()) out += (out.empty() ? "" : ", ") + k + " " + format_value(k, v);
  return "{" + out + "}";
}

std::string format_answer(const nlohmann::json& answer) {
  if (!answer.is_object()) return format_value("", answer) + "\n";
  std::ostringstream lines, tables;
  size_t key_width = 0;
  for (const auto& [key, value] : answer.items()) {
    if (!is_table(value)) key_width = std::max(key_width, key.size());
  }
  for (const auto& [key, value] : answer.items()) {
    if (is_table(value)) {
      // A sharded run's answers: each shard's answer under its own heading.
      if (key == "shards" && value.front().contains("answer")) {
        for (const auto& shard : value) {
          tables << "\n== shard " << format_value("", shard.value("shard", nlohmann::json())) << " ("
                 << shard.value("target", std::string()) << ")\n" << format_answer(shard["answer"]);
        }
        continue;
      }
      tables << "\n" << key << "\n" << table(value);
    } else if (value.is_object() && !value.empty()) {
      const std::string inner = format_value(key, value);  // {k v, ...}: the braces are the line's own
      lines << key << ":" << std::string(key_width - key.size() + 1, ' ') << inner.substr(1, inner.size() - 2) << "\n";
    } else {
      lines << key << ":" << std::string(key_width - key.size() + 1, ' ') << format_value(key, value) << "\n";
    }
  }
  std::string out = lines.str() + tables.str();
  if (!out.empty() && out.front() == '\n') out.erase(0, 1);
  return out;
}

}  // namespace archipelago::apps
