// Tensor codecs: float arrays <-> bytes, losslessly (fp32) or compressed (bf16, int8, 4-bit).
//
// Layouts (little-endian, no header: codec and element count travel in TensorChunk):
//   fp32          n x float
//   bf16          n x uint16 (upper half of the fp32 bits, rounded to nearest even)
//   int8          ceil(n/256) x float scale, then n x int8           x = q * scale
//   int4_e2m1     ceil(n/64) x float scale, then ceil(n/2) bytes      x = e2m1(nibble) * scale
//   int4_uniform  ceil(n/64) x float scale, then ceil(n/2) bytes      x = int4(nibble) * scale
// (element 2i in the low nibble, 2i+1 in the high one). Scales come first so that a receiver can
// check them from any chunk without the rest of the tensor.
//
// A scale is valid when it is +0 or a positive fp32 no larger than the codec's bound: the largest
// scale whose product with the largest code the layout can hold (int8: 128, int4_uniform: 8,
// int4_e2m1: 6) is still finite. Codes are bounded, so valid scales are exactly what keeps every
// decoded value finite; a finite but huge scale (3e38) would otherwise decode to ±Inf.
//
// Invariant: encode never emits NaN/Inf or an invalid scale for finite input (a block near FLT_MAX
// gets the bound as its scale and saturates its codes; non-finite input is refused with non_finite),
// and decode refuses bytes that would produce NaN/Inf (non_finite: NaN/Inf values, NaN/Inf or
// too-large scales) or that no encoder writes (inconsistent: a negative scale, -0 included), naming
// the codec, the chunk and the block, so that the syncer can quarantine them.
// Pure functions, no state: any thread may call them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "common/error.hpp"

namespace archipelago::messages {

// Values are the wire enum values of `Codec` in archipelago.capnp.
enum class Codec : uint8_t {
  fp32 = 0,
  bf16 = 1,
  int8 = 2,
  int4_e2m1 = 3,
  int4_uniform = 4,
};

// The 4-bit codec configs mean by "int4": the integer grid. On real pseudo-gradients (Δ of the
// tiny model after 30 and 150 AdamW steps, tests/training/codec_pseudo_gradient_test.cpp) its
// relative L2 error is 0.063 / 0.089 vs 0.105 / 0.106 for E2M1: AdamW's updates are sign-like,
// with magnitudes spread evenly up to the block's scale, which an even grid fits. On synthetic
// heavy-tailed data E2M1 wins (0.052 vs 0.066, bench/messages/README.md); real data decides.
inline constexpr Codec kInt4 = Codec::int4_uniform;

// True for the values listed in `Codec` (a wire byte may hold anything).
bool is_known_codec(uint32_t raw);
const char* codec_name(Codec codec);
// Accepts the names codec_name returns, plus "int4" (= kInt4).
Expected<Codec> parse_codec(std::string_view name);

// Encoded size of `element_count` floats; oversized if it would not fit in 64 bits.
Expected<uint64_t> encoded_size(Codec codec, uint64_t element_count);

// Encodes `values[0..count)` into `out`, resized to encoded_size (its capacity is reused, so a
// caller encoding tensors of one size repeatedly does not allocate). non_finite if any value is
// NaN/Inf; `out` is then unspecified.
Status encode_tensor(Codec codec, const float* values, size_t count, std::vector<uint8_t>& out);

// Decodes `size` bytes holding `count` elements into `out[0..count)`. inconsistent if `size` is not
// encoded_size(codec, count) or a scale is negative; non_finite if the bytes hold NaN/Inf values or
// a scale beyond the codec's bound (see above). On an error `out` is unspecified (fp32 and bf16 check
// what they copied; the quantized codecs check every scale before writing a value).
Status decode_tensor(Codec codec, const uint8_t* bytes, size_t size, float* out, size_t count);
Expected<std::vector<float>> decode_tensor(Codec codec, const uint8_t* bytes, size_t size,
                                           size_t count);

// The quantized codecs (int8, int4_*) without a decoded copy, for a receiver that folds many tensors
// into one sum (the syncer's streaming merge). Both check the size and every scale first, by the rules
// of decode_tensor, and fail as it would; what they accept decodes to finite values.
//   quantized_norm:       ‖x‖₂ of the decoded tensor, from codes and scales (Σ_blocks scale² Σ code²).
//   accumulate_quantized: sum[i] += factor · x[i], x decoded on the fly; over `threads` threads
//                         (common/parallel.hpp). Rounds as (factor · scale) · code, not as a decode
//                         followed by a multiply: equal to that to a few ulp, not bit for bit.
bool is_quantized(Codec codec);
Expected<double> quantized_norm(Codec codec, const uint8_t* bytes, size_t size, size_t count);
Status accumulate_quantized(Codec codec, const uint8_t* bytes, size_t size, size_t count, float factor, float* sum,
                            int threads = 1);

// Checks one piece of an encoded tensor without decoding it, by the same rules as decode_tensor (NaN/Inf
// values; NaN/Inf, too-large or negative scales): `bytes[0..size)` sits at byte `offset` of a tensor
// of `element_count` elements; `offset` must be a multiple of kChunkAlignment. Lets a receiver reject
// a poisoned chunk before reassembling the tensor.
Status check_finite_range(Codec codec, uint64_t element_count, uint64_t offset,
                          const uint8_t* bytes, size_t size);

}  // namespace archipelago::messages
