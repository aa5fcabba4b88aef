// Whole-file reads and writes that a crash cannot leave half done.
#pragma once

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "common/error.hpp"

namespace archipelago {

// The file's bytes; not_found with the path named when it cannot be opened.
inline Expected<std::string> read_whole_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error(ErrorCode::not_found, "cannot open " + path);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// Writes `bytes` to <path>.partial, then renames it over `path`: a reader sees the old file or the
// whole new one, never a part.
inline Status write_file_atomically(const std::string& path, const std::string& bytes) {
  const std::string partial = path + ".partial";
  {
    std::ofstream out(partial, std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out.flush()) return make_error(ErrorCode::io, "cannot write " + partial);
  }
  std::error_code ec;
  std::filesystem::rename(partial, path, ec);
  if (ec) return make_error(ErrorCode::io, "cannot write " + path + ": " + ec.message());
  return {};
}

}  // namespace archipelago
