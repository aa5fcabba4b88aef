#include "remote/door_stream.hpp"

#include <algorithm>

#include <kj/debug.h>

namespace archipelago::remote {

bool FrameSizes::feed(const uint8_t* bytes, size_t n, uint64_t limit) {
  size_t i = 0;
  while (i < n && !refused_) {
    if (part_ == Part::body) {
      const uint64_t take = std::min<uint64_t>(body_left_, n - i);
      body_left_ -= take;
      i += static_cast<size_t>(take);
      if (body_left_ == 0) part_ = Part::count;
      continue;
    }
    word_ |= static_cast<uint32_t>(bytes[i++]) << (8 * word_bytes_);
    if (++word_bytes_ < 4) continue;
    const uint32_t word = word_;
    word_ = 0;
    word_bytes_ = 0;
    if (part_ == Part::count) {
      if (word >= 512) {
        refused_ = true;
        break;
      }
      segments_ = word + 1;
      sizes_read_ = 0;
      frame_words_ = 0;
      part_ = Part::sizes;
    } else if (part_ == Part::sizes) {
      frame_words_ += word;
      if (++sizes_read_ == segments_) {
        largest_ = std::max(largest_, frame_words_ * 8);
        if (frame_words_ * 8 > limit) {
          refused_ = true;
          break;
        }
        body_left_ = frame_words_ * 8;
        // The header is (1 + segments) words of 4 bytes, padded to 8: one more when that is odd.
        part_ = (segments_ % 2 == 0) ? Part::padding : (body_left_ > 0 ? Part::body : Part::count);
      }
    } else {  // padding
      part_ = body_left_ > 0 ? Part::body : Part::count;
    }
  }
  return !refused_;
}

DoorStream::DoorStream(kj::Own<kj::AsyncIoStream> inner, uint64_t limit, std::function<void()> refused)
    : inner_(kj::mv(inner)), limit_(limit), refused_(std::move(refused)) {}

kj::Promise<size_t> DoorStream::tryRead(void* buffer, size_t minBytes, size_t maxBytes) {
  return inner_->tryRead(buffer, minBytes, maxBytes).then([this, buffer](size_t n) -> kj::Promise<size_t> {
    bytes_read_ += n;
    if (lifted_ || frames_.feed(static_cast<const uint8_t*>(buffer), n, limit_)) return n;
    if (!refused_once_) {
      refused_once_ = true;
      if (refused_) refused_();
    }
    return KJ_EXCEPTION(FAILED, "a frame larger than the limit before authentication");
  });
}

}  // namespace archipelago::remote
