// Throughput of the messages/ codecs on a 64 MiB fp32 tensor, against memcpy of the same bytes
// measured in the same run (so ratios hold on any machine), plus the accuracy of each codec.
// Usage: bench_codecs [MiB=64] [repeats=5]. Single-threaded. Results: bench/messages/README.md.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "messages/chunking.hpp"
#include "messages/envelope.hpp"
#include "messages/tensor_codec.hpp"

using namespace archipelago::messages;

namespace {

// Median wall time of `repeats` runs of `fn`, after one warm-up run (page faults, caches).
double median_seconds(int repeats, const std::function<void()>& fn) {
  fn();
  std::vector<double> times;
  for (int r = 0; r < repeats; ++r) {
    const auto start = std::chrono::steady_clock::now();
    fn();
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

void require(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "bench failed: %s\n", what);
    std::exit(1);
  }
}

double relative_l2(const std::vector<float>& truth, const std::vector<float>& approx) {
  double err = 0, norm = 0;
  for (size_t i = 0; i < truth.size(); ++i) {
    err += (double(truth[i]) - approx[i]) * (double(truth[i]) - approx[i]);
    norm += double(truth[i]) * truth[i];
  }
  return std::sqrt(err / norm);
}

}  // namespace

int main(int argc, char** argv) {
  const size_t mib = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 64;
  const int repeats = argc > 2 ? std::atoi(argv[2]) : 5;
  const size_t n = mib * (size_t{1} << 20) / 4;
  const double bytes = double(n) * 4;

  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::student_t_distribution<float> student(2.0f);
  std::bernoulli_distribution active(0.1);
  std::vector<float> gaussian(n), heavy(n);
  for (auto& x : gaussian) x = normal(rng);
  for (auto& x : heavy) x = active(rng) ? student(rng) : 0.01f * normal(rng);

  std::vector<float> copy(n), decoded(n);
  const double memcpy_s = median_seconds(repeats, [&] { std::memcpy(copy.data(), gaussian.data(), n * 4); });
  const double memcpy_gbs = bytes / memcpy_s / 1e9;
  std::printf("tensor: %zu MiB fp32 (%zu elements), median of %d runs, one thread\n", mib, n, repeats);
  std::printf("%-34s %8.2f GB/s  1.00x memcpy\n", "memcpy", memcpy_gbs);

  // Framing: the fp32 tensor as 4 MiB chunks, each FragmentUpdate envelope encoded into one reused
  // buffer and decoded (zero-copy) from it, finite check included.
  auto tensor = std::make_shared<std::vector<uint8_t>>();
  require(encode_tensor(Codec::fp32, gaussian.data(), n, *tensor).ok(), "fp32 encode");
  auto chunks = split_tensor(Codec::fp32, n, ByteView{tensor->data(), tensor->size(), tensor});
  require(chunks.ok(), "split");
  auto wire = std::make_shared<std::vector<uint8_t>>();
  uint64_t sink = 0;
  auto frame_all = [&] {
    for (const TensorChunk& chunk : *chunks) {
      FragmentUpdate update{"learner-0", 1, 7, 100, 1 << 20, 2.5f, chunk};
      require(encode(Envelope{kProtocolVersion, "learner-0", 1, std::move(update)}, *wire).ok(), "encode");
      auto env = decode(ByteView{wire->data(), wire->size(), wire});
      require(env.ok(), "decode");
      sink += std::get<FragmentUpdate>(env->body).chunk.payload.size;
    }
  };
  const double framing_s = median_seconds(repeats, frame_all);
  std::printf("%-34s %8.2f GB/s  %.2fx memcpy\n", "fp32 framing (encode+decode)",
              bytes / framing_s / 1e9, memcpy_s / framing_s);

  // End to end for fp32: tensor encode, split, frame, decode, reassemble (checksums), tensor decode.
  auto end_to_end = [&] {
    require(encode_tensor(Codec::fp32, gaussian.data(), n, *tensor).ok(), "encode");
    auto parts = split_tensor(Codec::fp32, n, ByteView{tensor->data(), tensor->size(), tensor});
    Reassembler reassembler(uint64_t{1} << 34);
    for (const TensorChunk& chunk : *parts) {
      require(encode(Envelope{kProtocolVersion, "s", 1, GlobalFragment{1, 2, chunk}}, *wire).ok(), "encode");
      auto env = decode(ByteView{wire->data(), wire->size(), wire});
      require(env.ok() && reassembler.add(std::get<GlobalFragment>(env->body).chunk).ok(), "add");
    }
    auto whole = reassembler.take();
    require(whole.ok(), "take");
    require(decode_tensor(Codec::fp32, whole->data(), whole->size(), decoded.data(), n).ok(), "decode");
  };
  const double e2e_s = median_seconds(repeats, end_to_end);
  std::printf("%-34s %8.2f GB/s  %.2fx memcpy\n", "fp32 end to end (+chunks, xxh3)",
              bytes / e2e_s / 1e9, memcpy_s / e2e_s);

  // Quantize + dequantize per codec (throughput counted in fp32 input bytes), plus accuracy.
  std::vector<uint8_t> encoded;
  std::printf("\n%-14s %10s %10s %8s %12s %12s\n", "codec", "GB/s", "x memcpy", "bits/el",
              "relL2 gauss", "relL2 heavy");
  for (Codec codec : {Codec::fp32, Codec::bf16, Codec::int8, Codec::int4_e2m1, Codec::int4_uniform}) {
    auto round_trip = [&] {
      require(encode_tensor(codec, gaussian.data(), n, encoded).ok(), "encode");
      require(decode_tensor(codec, encoded.data(), encoded.size(), decoded.data(), n).ok(), "decode");
    };
    const double s = median_seconds(repeats, round_trip);
    const double gauss_err = relative_l2(gaussian, decoded);
    require(encode_tensor(codec, heavy.data(), n, encoded).ok(), "encode heavy");
    require(decode_tensor(codec, encoded.data(), encoded.size(), decoded.data(), n).ok(), "decode heavy");
    const double heavy_err = relative_l2(heavy, decoded);
    std::printf("%-14s %10.2f %10.2f %8.2f %12.5f %12.5f\n", codec_name(codec), bytes / s / 1e9,
                memcpy_s / s, 8.0 * encoded.size() / n, gauss_err, heavy_err);
  }
  return sink == 0;  // keeps the framing loop from being optimized away
}
