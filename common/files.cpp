#include "common/files.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>

namespace archipelago {

Expected<std::string> read_whole_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error(ErrorCode::not_found, "cannot open " + path);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

std::string partial_path(const std::string& path) { return path + ".partial"; }

Status write_file_atomically(const std::string& path, std::string_view bytes, bool sync) {
  const std::string partial = partial_path(path);
  auto failed = [&](const std::string& what, const std::string& where) -> Status {
    Status error = make_error(ErrorCode::io, what + " " + where + ": " + std::strerror(errno));
    ::unlink(partial.c_str());
    return error;
  };
  const int fd = ::open(partial.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return failed("cannot create", partial);
  size_t written = 0;
  while (written < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + written, bytes.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ::close(fd);
      return failed("cannot write", partial);
    }
    written += static_cast<size_t>(n);
  }
  if (sync && ::fdatasync(fd) != 0) {
    ::close(fd);
    return failed("cannot sync", partial);
  }
  if (::close(fd) != 0) return failed("cannot write", partial);
  if (::rename(partial.c_str(), path.c_str()) != 0) return failed("cannot rename into", path);
  return {};
}

void LineTail::reset(std::filesystem::path path) {
  path_ = std::move(path);
  offset_ = 0;
  partial_.clear();
}

void LineTail::skip_existing() {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path_, ec);
  offset_ = ec ? 0 : static_cast<size_t>(size);
  partial_.clear();
}

std::vector<std::string> LineTail::lines() {
  std::vector<std::string> out;
  std::ifstream in(path_, std::ios::binary);
  if (!in) return out;
  in.seekg(static_cast<std::streamoff>(offset_));
  std::string chunk((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  offset_ += chunk.size();
  partial_ += chunk;
  for (size_t at; (at = partial_.find('\n')) != std::string::npos;) {
    out.push_back(partial_.substr(0, at));
    partial_.erase(0, at + 1);
  }
  return out;
}

}  // namespace archipelago
