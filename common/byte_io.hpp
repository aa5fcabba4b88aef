// Little-endian byte strings for the project's own record and file formats (storage records, learner
// checkpoints): an appender, and a cursor that refuses to read past the end instead of trusting
// lengths found in the data. Header-only, no dependencies. Pure; any thread.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace archipelago {

// Appends the low `bytes` bytes of `value`, least significant first.
inline void put_le(std::string& out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

class ByteReader {
 public:
  explicit ByteReader(std::string_view bytes) : bytes_(bytes) {}
  // Reads a `width`-byte little-endian unsigned integer; false (and nothing consumed) at the end.
  bool le(uint64_t& value, int width) {
    if (remaining() < static_cast<size_t>(width)) return false;
    value = 0;
    for (int i = 0; i < width; ++i) value |= static_cast<uint64_t>(static_cast<uint8_t>(bytes_[offset_ + i])) << (8 * i);
    offset_ += width;
    return true;
  }
  bool bytes(std::string& out, size_t size) {
    if (remaining() < size) return false;
    out.assign(bytes_.data() + offset_, size);
    offset_ += size;
    return true;
  }
  // Copies `size` raw bytes into `out`.
  bool copy(void* out, size_t size) {
    if (remaining() < size) return false;
    std::memcpy(out, bytes_.data() + offset_, size);
    offset_ += size;
    return true;
  }
  size_t remaining() const { return bytes_.size() - offset_; }

 private:
  std::string_view bytes_;
  size_t offset_ = 0;
};

}  // namespace archipelago
