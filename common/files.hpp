// Whole-file reads and writes that a crash cannot leave half done, and a reader of the lines a file
// grows by (a child process's output, a log another process appends to).
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.hpp"

namespace archipelago {

// The file's bytes; not_found with the path named when it cannot be opened.
Expected<std::string> read_whole_file(const std::string& path);

// Where write_file_atomically writes before it renames: "<path>.partial".
std::string partial_path(const std::string& path);

// Writes `bytes` to partial_path(path), then renames it over `path`: a reader sees the old file or
// the whole new one, never a part, and a failed write leaves no partial file behind. `sync` adds an
// fdatasync before the rename: without it the file survives a process kill, not a power loss.
Status write_file_atomically(const std::string& path, std::string_view bytes, bool sync = false);

// Reads what a file grew by since the last call, line by line; a partial last line waits until it
// is whole. A file that does not exist yet reads as empty.
class LineTail {
 public:
  explicit LineTail(std::filesystem::path path = {}) : path_(std::move(path)) {}
  // Follows `path` from its start.
  void reset(std::filesystem::path path);
  // Goes on after what the file holds now, a partial last line included (what another writer
  // appends next starts a line of its own).
  void skip_existing();
  std::vector<std::string> lines();

 private:
  std::filesystem::path path_;
  size_t offset_ = 0;
  std::string partial_;
};

}  // namespace archipelago
