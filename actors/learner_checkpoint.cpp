#include "actors/learner_checkpoint.hpp"

#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>

#include <xxhash.h>

#include "common/byte_io.hpp"
#include "common/files.hpp"

namespace archipelago::actors {
namespace {

constexpr uint32_t kMagic = 0x4b434c41;  // "ALCK"
constexpr uint32_t kFormat = 3;

void put_double(std::string& out, double value) {
  uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof bits);
  put_le(out, bits, 8);
}

// A length, then the values as they are in memory (IEEE-754 binary32, little-endian hosts).
void put_floats(std::string& out, const std::vector<float>& values) {
  put_le(out, values.size(), 8);
  out.append(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
}

bool get_double(ByteReader& in, double& value) {
  uint64_t bits = 0;
  if (!in.le(bits, 8)) return false;
  std::memcpy(&value, &bits, sizeof value);
  return true;
}

// Reads a float array whose length must be `expected`, all finite.
Status get_floats(ByteReader& in, std::vector<float>& values, uint64_t expected, const std::string& what) {
  uint64_t n = 0;
  if (!in.le(n, 8)) return make_error(ErrorCode::truncated, what + ": the file ends early");
  if (n != expected) {
    return make_error(ErrorCode::inconsistent, what + " holds " + std::to_string(n) + " values, this run's layout " +
                                                   std::to_string(expected));
  }
  if (in.remaining() / sizeof(float) < n) return make_error(ErrorCode::truncated, what + ": the file ends early");
  values.resize(n);
  in.copy(values.data(), n * sizeof(float));
  for (float x : values) {
    if (!std::isfinite(x)) return make_error(ErrorCode::non_finite, what + " holds a NaN or Inf");
  }
  return {};
}

}  // namespace

std::string learner_checkpoint_path(const std::string& directory, const std::string& learner_id) {
  return directory + "/" + learner_id + ".ckpt";
}

Status save_learner_checkpoint(const std::string& path, const LearnerCheckpoint& c, bool sync) {
  std::string bytes;
  put_le(bytes, kMagic, 4);
  put_le(bytes, kFormat, 4);
  put_le(bytes, static_cast<uint64_t>(c.step), 8);
  put_le(bytes, static_cast<uint32_t>(c.incarnation), 4);
  put_le(bytes, static_cast<uint64_t>(c.optimizer.schedule_steps), 8);
  put_le(bytes, static_cast<uint64_t>(c.optimizer.adam_steps), 8);
  put_le(bytes, c.fragments.size(), 4);
  for (const auto& f : c.fragments) {
    put_le(bytes, f.version, 8);
    put_le(bytes, static_cast<uint64_t>(f.since_step), 8);
    put_le(bytes, static_cast<uint64_t>(f.steps), 8);
    put_le(bytes, static_cast<uint64_t>(f.tokens), 8);
    put_double(bytes, f.loss_sum);
    put_double(bytes, f.compute_s);
    put_floats(bytes, f.unsent);
  }
  if (c.optimizer.adam_steps > 0) {
    put_floats(bytes, c.optimizer.exp_avg);
    put_floats(bytes, c.optimizer.exp_avg_sq);
  }
  put_le(bytes, XXH3_64bits(bytes.data(), bytes.size()), 8);

  return write_file_atomically(path, bytes, sync);
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

  ByteReader r(bytes);
  uint64_t magic = 0, format = 0, step = 0, incarnation = 0, schedule_steps = 0, adam_steps = 0, fragments = 0;
  LearnerCheckpoint c;
  if (!r.le(magic, 4) || magic != kMagic) return make_error(ErrorCode::corrupt, path + ": not a learner checkpoint");
  if (!r.le(format, 4) || format != kFormat) {
    return make_error(ErrorCode::wrong_version, path + ": format " + std::to_string(format) + ", this build reads " +
                                                    std::to_string(kFormat));
  }
  if (!r.le(step, 8) || !r.le(incarnation, 4) || !r.le(schedule_steps, 8) || !r.le(adam_steps, 8) ||
      !r.le(fragments, 4)) {
    return make_error(ErrorCode::truncated, path + ": the header ends early");
  }
  c.step = static_cast<int64_t>(step);
  c.incarnation = static_cast<int32_t>(incarnation);
  c.optimizer.schedule_steps = static_cast<int64_t>(schedule_steps);
  c.optimizer.adam_steps = static_cast<int64_t>(adam_steps);
  if (c.step < 0 || c.optimizer.schedule_steps < 0 || c.optimizer.adam_steps < 0) {
    return make_error(ErrorCode::inconsistent, path + ": negative step count");
  }
  if (fragments != fragment_sizes.size()) {
    return make_error(ErrorCode::inconsistent, path + ": " + std::to_string(fragments) + " fragments, this run has " +
                                                   std::to_string(fragment_sizes.size()));
  }
  c.fragments.resize(fragments);
  for (uint64_t p = 0; p < fragments; ++p) {
    auto& f = c.fragments[p];
    uint64_t since = 0, steps = 0, tokens = 0;
    if (!r.le(f.version, 8) || !r.le(since, 8) || !r.le(steps, 8) || !r.le(tokens, 8) || !get_double(r, f.loss_sum) ||
        !get_double(r, f.compute_s)) {
      return make_error(ErrorCode::truncated, path + ": fragment " + std::to_string(p) + " ends early");
    }
    f.since_step = static_cast<int64_t>(since);
    f.steps = static_cast<int64_t>(steps);
    f.tokens = static_cast<int64_t>(tokens);
    if (f.since_step < 0 || f.since_step > c.step) {
      return make_error(ErrorCode::inconsistent, path + ": fragment " + std::to_string(p) + "'s work begins after the checkpoint");
    }
    if (f.steps < 0 || f.tokens < 0) return make_error(ErrorCode::inconsistent, path + ": negative counters");
    if (!std::isfinite(f.compute_s) || f.compute_s < 0) {
      return make_error(ErrorCode::inconsistent, path + ": fragment " + std::to_string(p) + "'s compute time is not a duration");
    }
    Status read = get_floats(r, f.unsent, static_cast<uint64_t>(fragment_sizes[p]), path + ": fragment " + std::to_string(p));
    if (!read) return read.error();
  }
  if (c.optimizer.adam_steps > 0) {
    for (auto* moments : {&c.optimizer.exp_avg, &c.optimizer.exp_avg_sq}) {
      Status read = get_floats(r, *moments, static_cast<uint64_t>(parameter_count), path + ": AdamW moments");
      if (!read) return read.error();
    }
  }
  if (r.remaining() != 0) return make_error(ErrorCode::inconsistent, path + ": bytes after the last field");
  return c;
}

}  // namespace archipelago::actors
