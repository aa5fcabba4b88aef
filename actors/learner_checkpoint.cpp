#include "actors/learner_checkpoint.hpp"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>

#include <fcntl.h>
#include <unistd.h>
#include <xxhash.h>

namespace archipelago::actors {
namespace {

constexpr uint32_t kMagic = 0x4b434c41;  // "ALCK"
constexpr uint32_t kFormat = 1;

class Writer {
 public:
  template <typename T>
  void value(T v) {
    static_assert(std::is_trivially_copyable<T>::value, "plain values only");
    const auto* p = reinterpret_cast<const char*>(&v);
    bytes_.append(p, sizeof v);
  }
  void floats(const std::vector<float>& v) {
    value<uint64_t>(v.size());
    bytes_.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
  }
  std::string& bytes() { return bytes_; }

 private:
  std::string bytes_;
};

class Parser {
 public:
  explicit Parser(const std::string& bytes) : data_(bytes.data()), size_(bytes.size()) {}
  template <typename T>
  bool value(T& v) {
    if (size_ - at_ < sizeof v) return false;
    std::memcpy(&v, data_ + at_, sizeof v);
    at_ += sizeof v;
    return true;
  }
  // Reads a float array whose length must be `expected`.
  Status floats(std::vector<float>& v, uint64_t expected, const std::string& what) {
    uint64_t n = 0;
    if (!value(n)) return make_error(ErrorCode::truncated, what + ": the file ends early");
    if (n != expected) {
      return make_error(ErrorCode::inconsistent, what + " holds " + std::to_string(n) + " values, this run's layout " +
                                                     std::to_string(expected));
    }
    if ((size_ - at_) / sizeof(float) < n) return make_error(ErrorCode::truncated, what + ": the file ends early");
    v.resize(n);
    std::memcpy(v.data(), data_ + at_, n * sizeof(float));
    at_ += n * sizeof(float);
    for (float x : v) {
      if (!std::isfinite(x)) return make_error(ErrorCode::non_finite, what + " holds a NaN or Inf");
    }
    return {};
  }
  bool done() const { return at_ == size_; }

 private:
  const char* data_;
  size_t size_;
  size_t at_ = 0;
};

Status io_error(const std::string& what, const std::string& path) {
  return make_error(ErrorCode::io, what + " " + path + ": " + std::strerror(errno));
}

}  // namespace

std::string learner_checkpoint_path(const std::string& directory, const std::string& learner_id) {
  return directory + "/" + learner_id + ".ckpt";
}

Status save_learner_checkpoint(const std::string& path, const LearnerCheckpoint& c, bool sync) {
  Writer w;
  w.value(kMagic);
  w.value(kFormat);
  w.value<int64_t>(c.step);
  w.value<int32_t>(c.incarnation);
  w.value<int64_t>(c.optimizer.schedule_steps);
  w.value<int64_t>(c.optimizer.adam_steps);
  w.value<uint32_t>(static_cast<uint32_t>(c.fragments.size()));
  for (const auto& f : c.fragments) {
    w.value<uint64_t>(f.version);
    w.value<int64_t>(f.steps);
    w.value<int64_t>(f.tokens);
    w.value<double>(f.loss_sum);
    w.floats(f.unsent);
  }
  if (c.optimizer.adam_steps > 0) {
    w.floats(c.optimizer.exp_avg);
    w.floats(c.optimizer.exp_avg_sq);
  }
  w.value<uint64_t>(XXH3_64bits(w.bytes().data(), w.bytes().size()));

  const std::string temporary = path + ".tmp";
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return io_error("cannot create", temporary);
  const std::string& bytes = w.bytes();
  size_t written = 0;
  while (written < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + written, bytes.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      Status failed = io_error("cannot write", temporary);
      ::close(fd);
      ::unlink(temporary.c_str());
      return failed;
    }
    written += static_cast<size_t>(n);
  }
  if (sync && ::fdatasync(fd) != 0) {
    Status failed = io_error("cannot sync", temporary);
    ::close(fd);
    ::unlink(temporary.c_str());
    return failed;
  }
  ::close(fd);
  if (::rename(temporary.c_str(), path.c_str()) != 0) {
    Status failed = io_error("cannot rename into", path);
    ::unlink(temporary.c_str());
    return failed;
  }
  return {};
}

Expected<LearnerCheckpoint> load_learner_checkpoint(const std::string& path, int64_t parameter_count,
                                                    const std::vector<int64_t>& fragment_sizes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error(ErrorCode::not_found, "no learner checkpoint at " + path);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (bytes.size() < 8) return make_error(ErrorCode::truncated, path + ": " + std::to_string(bytes.size()) + " bytes");
  uint64_t stored = 0;
  std::memcpy(&stored, bytes.data() + bytes.size() - 8, 8);
  bytes.resize(bytes.size() - 8);
  if (XXH3_64bits(bytes.data(), bytes.size()) != stored) return make_error(ErrorCode::corrupt, path + ": checksum mismatch");

  Parser r(bytes);
  uint32_t magic = 0, format = 0, fragments = 0;
  int32_t incarnation = 0;
  LearnerCheckpoint c;
  if (!r.value(magic) || magic != kMagic) return make_error(ErrorCode::corrupt, path + ": not a learner checkpoint");
  if (!r.value(format) || format != kFormat) {
    return make_error(ErrorCode::wrong_version, path + ": format " + std::to_string(format) + ", this build reads " +
                                                    std::to_string(kFormat));
  }
  if (!r.value(c.step) || !r.value(incarnation) || !r.value(c.optimizer.schedule_steps) ||
      !r.value(c.optimizer.adam_steps) || !r.value(fragments)) {
    return make_error(ErrorCode::truncated, path + ": the header ends early");
  }
  c.incarnation = incarnation;
  if (c.step < 0 || c.optimizer.schedule_steps < 0 || c.optimizer.adam_steps < 0) {
    return make_error(ErrorCode::inconsistent, path + ": negative step count");
  }
  if (fragments != fragment_sizes.size()) {
    return make_error(ErrorCode::inconsistent, path + ": " + std::to_string(fragments) + " fragments, this run has " +
                                                   std::to_string(fragment_sizes.size()));
  }
  c.fragments.resize(fragments);
  for (uint32_t p = 0; p < fragments; ++p) {
    auto& f = c.fragments[p];
    if (!r.value(f.version) || !r.value(f.steps) || !r.value(f.tokens) || !r.value(f.loss_sum)) {
      return make_error(ErrorCode::truncated, path + ": fragment " + std::to_string(p) + " ends early");
    }
    if (f.steps < 0 || f.tokens < 0) return make_error(ErrorCode::inconsistent, path + ": negative counters");
    Status read = r.floats(f.unsent, static_cast<uint64_t>(fragment_sizes[p]), path + ": fragment " + std::to_string(p));
    if (!read) return read.error();
  }
  if (c.optimizer.adam_steps > 0) {
    for (auto* moments : {&c.optimizer.exp_avg, &c.optimizer.exp_avg_sq}) {
      Status read = r.floats(*moments, static_cast<uint64_t>(parameter_count), path + ": AdamW moments");
      if (!read) return read.error();
    }
  }
  if (!r.done()) return make_error(ErrorCode::inconsistent, path + ": bytes after the last field");
  return c;
}

}  // namespace archipelago::actors
