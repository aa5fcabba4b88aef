#include "storage/blob_files.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

namespace archipelago::storage {
namespace {

constexpr const char* kTemporarySuffix = ".tmp";

Error os_error(const std::string& what) { return make_error(ErrorCode::io, what + ": " + std::strerror(errno)); }

// Closes a descriptor on every path out of a function.
struct Descriptor {
  int fd = -1;
  ~Descriptor() {
    if (fd >= 0) ::close(fd);
  }
};

// Writes all `size` bytes at `offset`, through short writes and EINTR.
Status write_fully(int fd, const uint8_t* data, size_t size, uint64_t offset, const std::string& path) {
  size_t done = 0;
  while (done < size) {
    ssize_t wrote = ::pwrite(fd, data + done, size - done, static_cast<off_t>(offset + done));
    if (wrote < 0 && errno == EINTR) continue;
    if (wrote <= 0) return os_error("cannot write " + path);
    done += static_cast<size_t>(wrote);
  }
  return Status::success();
}

}  // namespace

Expected<IncomingBlob> IncomingBlob::create(std::string path, uint64_t size) {
  IncomingBlob blob;
  blob.fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (blob.fd_ < 0) return os_error("cannot create " + path);
  blob.path_ = std::move(path);
  blob.size_ = size;
  if (::ftruncate(blob.fd_, static_cast<off_t>(size)) != 0) return os_error("cannot size " + blob.path_);
  return blob;
}

IncomingBlob::IncomingBlob(IncomingBlob&& other) noexcept { *this = std::move(other); }

IncomingBlob& IncomingBlob::operator=(IncomingBlob&& other) noexcept {
  if (this != &other) {
    close_and_unlink();
    path_ = std::move(other.path_);
    size_ = other.size_;
    fd_ = other.fd_;
    other.path_.clear();
    other.fd_ = -1;
  }
  return *this;
}

IncomingBlob::~IncomingBlob() { close_and_unlink(); }

void IncomingBlob::close_and_unlink() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!path_.empty()) ::unlink(path_.c_str());
  path_.clear();
}

Status IncomingBlob::write_at(uint64_t offset, const uint8_t* data, size_t size) {
  if (fd_ < 0) return make_error(ErrorCode::invalid_argument, "incoming blob is closed");
  if (offset > size_ || size > size_ - offset)
    return make_error(ErrorCode::invalid_argument, "write past the end of " + path_);
  return write_fully(fd_, data, size, offset, path_);
}

std::string IncomingBlob::take_path() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  std::string path = std::move(path_);
  path_.clear();
  return path;
}

BlobFiles::BlobFiles(std::string directory)
    : directory_(std::move(directory)), remover_([this] { remove_queued(); }) {}

BlobFiles::~BlobFiles() {
  {
    std::lock_guard<std::mutex> lock(removal_mutex_);
    stopping_ = true;
  }
  removal_wanted_.notify_one();
  remover_.join();
}

void BlobFiles::remove_later(const std::vector<std::string>& names) {
  if (names.empty()) return;
  {
    std::lock_guard<std::mutex> lock(removal_mutex_);
    removals_.insert(removals_.end(), names.begin(), names.end());
  }
  removal_wanted_.notify_one();
}

void BlobFiles::remove_queued() {
  std::unique_lock<std::mutex> lock(removal_mutex_);
  for (;;) {
    removal_wanted_.wait(lock, [this] { return stopping_ || !removals_.empty(); });
    if (removals_.empty()) return;  // stopping, and nothing left to do
    remove(removals_.front());
    removals_.pop_front();
  }
}

Status BlobFiles::create_directory() const {
  std::error_code error;
  std::filesystem::create_directories(directory_, error);
  if (error) return make_error(ErrorCode::io, "cannot create " + directory_ + ": " + error.message());
  return Status::success();
}

Status BlobFiles::write_all(const std::vector<Pending>& blobs) {
  if (blobs.empty()) return Status::success();
  std::vector<std::string> names;
  for (const Pending& blob : blobs) names.push_back(blob.name);
  if (Status staged = write_staged(blobs, ""); !staged.ok()) return staged;
  return publish(names, "");
}

std::string BlobFiles::staged_path(const std::string& name, const std::string& tag) const {
  return path_of(name) + (tag.empty() ? "" : "." + tag) + kTemporarySuffix;
}

Status BlobFiles::write_staged(const std::vector<Pending>& blobs, const std::string& tag) {
  // Write everything before the first fdatasync so the kernel can stream all files to disk at once.
  std::vector<Descriptor> files(blobs.size());
  for (size_t i = 0; i < blobs.size(); ++i) {
    std::string temporary = staged_path(blobs[i].name, tag);
    files[i].fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (files[i].fd < 0) return os_error("cannot create " + temporary);
    if (Status written = write_fully(files[i].fd, blobs[i].data, blobs[i].size, 0, temporary); !written.ok()) return written;
    // Start this file's writeback now, so the disk works while the next file is copied in; the
    // fdatasync below then mostly waits for I/O already under way. A hint: failure changes nothing.
    ::sync_file_range(files[i].fd, 0, 0, SYNC_FILE_RANGE_WRITE);
  }
  for (size_t i = 0; i < blobs.size(); ++i) {
    if (::fdatasync(files[i].fd) != 0) return os_error("cannot sync blob file " + blobs[i].name);
  }
  return Status::success();
}

Status BlobFiles::stage_file(const std::string& path, const std::string& name, const std::string& tag) const {
  Descriptor file{::open(path.c_str(), O_WRONLY | O_CLOEXEC)};
  if (file.fd < 0) return os_error("cannot open " + path);
  if (::fdatasync(file.fd) != 0) return os_error("cannot sync " + path);
  if (::rename(path.c_str(), staged_path(name, tag).c_str()) != 0) return os_error("cannot stage " + path);
  return Status::success();
}

Status BlobFiles::publish(const std::vector<std::string>& names, const std::string& tag) {
  if (names.empty()) return Status::success();
  {
    std::lock_guard<std::mutex> lock(removal_mutex_);
    for (const std::string& name : names)
      removals_.erase(std::remove(removals_.begin(), removals_.end(), name), removals_.end());
  }
  for (const std::string& name : names) {
    std::string final_path = path_of(name);
    if (::rename(staged_path(name, tag).c_str(), final_path.c_str()) != 0)
      return os_error("cannot rename blob file into " + final_path);
  }
  return sync_directory();
}

void BlobFiles::discard_staged(const std::vector<std::string>& names, const std::string& tag) const {
  for (const std::string& name : names) ::unlink(staged_path(name, tag).c_str());
}

Status BlobFiles::sync_directory() const {
  Descriptor directory{::open(directory_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)};
  if (directory.fd < 0 || ::fsync(directory.fd) != 0) return os_error("cannot sync " + directory_);
  return Status::success();
}

Status BlobFiles::read(const std::string& name, std::string& out) const {
  std::string path = path_of(name);
  Descriptor file{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (file.fd < 0) {
    if (errno == ENOENT) return make_error(ErrorCode::not_found, "blob file " + path + " is missing");
    return os_error("cannot open " + path);
  }
  struct stat info {};
  if (::fstat(file.fd, &info) != 0) return os_error("cannot stat " + path);
  out.resize(static_cast<size_t>(info.st_size));
  size_t done = 0;
  while (done < out.size()) {
    ssize_t got = ::read(file.fd, out.data() + done, out.size() - done);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return os_error("cannot read " + path);
    if (got == 0) break;
    done += static_cast<size_t>(got);
  }
  out.resize(done);
  return Status::success();
}

void BlobFiles::remove(const std::string& name) const { ::unlink(path_of(name).c_str()); }

std::vector<std::string> BlobFiles::list_and_remove_temporaries() const {
  std::vector<std::string> names;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(directory_, error)) {
    std::string name = entry.path().filename().string();
    if (name.size() > 4 && name.compare(name.size() - 4, 4, kTemporarySuffix) == 0) {
      std::filesystem::remove(entry.path(), error);
      continue;
    }
    names.push_back(name);
  }
  return names;
}

}  // namespace archipelago::storage
