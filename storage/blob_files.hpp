// Large blobs as plain files, one per content address, in `<store>/blob_files/`.
//
// Why: a 100 MB value through RocksDB is written twice (WAL, then flush) and copied twice (batch,
// memtable); as a file it is written once, at the speed of write + fdatasync, and deleting it frees the
// space at once. RocksDB still holds the reference count and the version record, so a commit is
// durable only once its batch is: files are made durable first (`write_all`), the batch second, and a
// crash in between leaves unreferenced files that `open`'s sweep removes. Files are written to a
// temporary name and renamed, so a visible name never holds a partial blob.
//
// Deleting a 12 MB file costs milliseconds of extent freeing, so garbage files are unlinked by a
// background thread (`remove_later`) rather than on the commit path; a commit that brings the same
// content back first cancels its pending removal (`write_all` does this), so a live blob is never
// unlinked. Removals still queued at a crash are orphans, which the next open sweeps.
//
// Thread-safety: the store calls write_all and remove_later under its write mutex; read may run from
// any thread concurrently.
#pragma once

#include <condition_variable>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/error.hpp"

namespace archipelago::storage {

// A blob that arrives in pieces, in any order, written straight into a temporary file of its own
// (BlobFiles::incoming_path), so that the process never holds it whole. Movable, not copyable; the
// destructor unlinks a file that was not taken (`take_path`) by a prepare.
class IncomingBlob {
 public:
  IncomingBlob() = default;
  // Creates (truncates) `path` as a file of `size` bytes.
  static Expected<IncomingBlob> create(std::string path, uint64_t size);
  IncomingBlob(IncomingBlob&& other) noexcept;
  IncomingBlob& operator=(IncomingBlob&& other) noexcept;
  IncomingBlob(const IncomingBlob&) = delete;
  IncomingBlob& operator=(const IncomingBlob&) = delete;
  ~IncomingBlob();

  // io on a failed write; invalid_argument past the end.
  Status write_at(uint64_t offset, const uint8_t* data, size_t size);
  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // Closes the file and hands it over: the caller renames or unlinks it.
  std::string take_path();

 private:
  void close_and_unlink();
  std::string path_;
  uint64_t size_ = 0;
  int fd_ = -1;
};

class BlobFiles {
 public:
  explicit BlobFiles(std::string directory);
  ~BlobFiles();  // finishes the queued removals
  BlobFiles(const BlobFiles&) = delete;
  BlobFiles& operator=(const BlobFiles&) = delete;

  Status create_directory() const;

  struct Pending {
    std::string name;  // hex of the blob key
    const uint8_t* data;
    size_t size;
  };
  // Writes every blob under a temporary name, fdatasyncs each, renames them into place and fsyncs
  // the directory: on success all are durable under their final names.
  Status write_all(const std::vector<Pending>& blobs);

  // The same in two steps, so that the bytes can be written without the store's write mutex:
  // write_staged makes each blob durable under a temporary name of its own (`tag` tells apart two
  // commits staging the same content); publish renames the named ones into place (cancelling a
  // queued removal of the same name first) and fsyncs the directory; discard_staged unlinks the
  // staged files that were not published. Staged files left by a crash are temporaries, which the
  // next open deletes. write_staged and discard_staged may run on any thread; publish runs under
  // the store's write mutex.
  Status write_staged(const std::vector<Pending>& blobs, const std::string& tag);
  // Where an IncomingBlob of a commit is written: a temporary, deleted by the next open if a crash
  // leaves it. `stage_file` makes such a file durable and renames it to what write_staged would have
  // written for `name` under `tag`.
  std::string incoming_path(const std::string& what) const { return path_of("incoming." + what) + ".tmp"; }
  Status stage_file(const std::string& path, const std::string& name, const std::string& tag) const;
  Status publish(const std::vector<std::string>& names, const std::string& tag);
  void discard_staged(const std::vector<std::string>& names, const std::string& tag) const;

  // Reads the whole file into `out`. not_found when absent, io on a read error.
  Status read(const std::string& name, std::string& out) const;

  // Unlinks now. Best effort: a file that cannot be removed is swept at the next open.
  void remove(const std::string& name) const;
  // Queues the unlink for the background thread.
  void remove_later(const std::vector<std::string>& names);

  // Names of the blob files present (complete ones; temporaries are deleted on the way).
  std::vector<std::string> list_and_remove_temporaries() const;

  std::string path_of(const std::string& name) const { return directory_ + "/" + name; }

 private:
  void remove_queued();
  std::string staged_path(const std::string& name, const std::string& tag) const;
  Status sync_directory() const;

  std::string directory_;
  std::mutex removal_mutex_;  // held while unlinking, so that cancel-then-write cannot interleave
  std::condition_variable removal_wanted_;
  std::deque<std::string> removals_;
  bool stopping_ = false;
  std::thread remover_;
};

}  // namespace archipelago::storage
