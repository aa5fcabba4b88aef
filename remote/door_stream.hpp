// The plane's read side before a peer has proved a token. Cap'n Proto allocates a message's whole
// size as its frame header states it, before the bytes arrive: an outsider that sends 16 MiB frame
// headers on 32 connections made the coordinator allocate half a gigabyte. Until lift(), DoorStream
// reads the frame headers in the byte stream it passes on and fails the read of any frame that
// states more than `limit` bytes (the Gateway's calls are a few hundred bytes); after lift() it is a
// plain pass-through. It also says whether a byte has come at all (the first-byte timeout).
// Loop thread only.
#pragma once

#include <cstdint>
#include <functional>

#include <kj/async-io.h>

namespace archipelago::remote {

// Cap'n Proto's stream framing (one message: a segment count - 1, the segments' sizes in words,
// padding to a word, then the segments), parsed a byte at a time: what a frame header states.
class FrameSizes {
 public:
  // Feeds `n` bytes of the stream; false once a header stated more than `limit` bytes or more than
  // 512 segments (then it stays false).
  bool feed(const uint8_t* bytes, size_t n, uint64_t limit);
  uint64_t largest_bytes() const { return largest_; }

 private:
  enum class Part { count, sizes, padding, body } part_ = Part::count;
  uint32_t word_ = 0;  // the little-endian word being read
  int word_bytes_ = 0;
  uint32_t segments_ = 0, sizes_read_ = 0;
  uint64_t frame_words_ = 0, body_left_ = 0;
  uint64_t largest_ = 0;
  bool refused_ = false;
};

class DoorStream final : public kj::AsyncIoStream {
 public:
  // `refused` runs once, when a frame past `limit` is refused (counts it).
  DoorStream(kj::Own<kj::AsyncIoStream> inner, uint64_t limit, std::function<void()> refused);

  void lift() { lifted_ = true; }
  bool heard() const { return bytes_read_ > 0; }

  kj::Promise<size_t> tryRead(void* buffer, size_t minBytes, size_t maxBytes) override;
  kj::Promise<void> write(const void* buffer, size_t size) override { return inner_->write(buffer, size); }
  kj::Promise<void> write(kj::ArrayPtr<const kj::ArrayPtr<const kj::byte>> pieces) override { return inner_->write(pieces); }
  kj::Promise<void> whenWriteDisconnected() override { return inner_->whenWriteDisconnected(); }
  void shutdownWrite() override { inner_->shutdownWrite(); }
  void abortRead() override { inner_->abortRead(); }
  void getsockopt(int level, int option, void* value, kj::uint* length) override { inner_->getsockopt(level, option, value, length); }
  void setsockopt(int level, int option, const void* value, kj::uint length) override { inner_->setsockopt(level, option, value, length); }
  void getsockname(struct sockaddr* addr, kj::uint* length) override { inner_->getsockname(addr, length); }
  void getpeername(struct sockaddr* addr, kj::uint* length) override { inner_->getpeername(addr, length); }

 private:
  kj::Own<kj::AsyncIoStream> inner_;
  uint64_t limit_;
  std::function<void()> refused_;
  FrameSizes frames_;
  bool lifted_ = false, refused_once_ = false;
  uint64_t bytes_read_ = 0;
};

}  // namespace archipelago::remote
