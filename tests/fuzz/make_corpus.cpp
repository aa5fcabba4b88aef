// Writes the seed corpus of the fuzz targets: a few valid encoded messages of every kind
// (envelope/), chunk streams separated by the "CHNK" marker (reassembler/) and encoded tensors of
// every codec behind tensor_codec_fuzz's header (tensor_codec/).
// Usage: messages_fuzz_corpus <repo>/tests/fuzz/corpus   (rerun only when the schema changes)
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "messages/chunking.hpp"
#include "messages/envelope.hpp"

using namespace archipelago::messages;

namespace {

void write(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                              static_cast<std::streamsize>(bytes.size()));
}

std::vector<uint8_t> envelope_bytes(Message body) {
  return *encode(Envelope{kProtocolVersion, "seed", 1, std::move(body)});
}

// Chunks of a small tensor, cut into pieces of 64 bytes, as GlobalFragment envelopes.
std::vector<std::vector<uint8_t>> chunk_envelopes(Codec codec, size_t elements) {
  std::vector<float> values(elements);
  for (size_t i = 0; i < elements; ++i) values[i] = static_cast<float>(i % 17) - 8.0f;
  auto bytes = std::make_shared<std::vector<uint8_t>>();
  (void)encode_tensor(codec, values.data(), values.size(), *bytes);
  auto chunks = *split_tensor(codec, elements, ByteView{bytes->data(), bytes->size(), bytes}, 64);
  std::vector<std::vector<uint8_t>> out;
  for (auto& chunk : chunks) out.push_back(envelope_bytes(GlobalFragment{1, 2, chunk}));
  return out;
}

// A tensor_codec_fuzz input: codec, flags (bit 0: explicit count), [count], chunk cut, payload.
std::vector<uint8_t> codec_seed(Codec codec, const std::vector<uint8_t>& payload, uint8_t cut,
                                const uint32_t* count = nullptr) {
  std::vector<uint8_t> out = {static_cast<uint8_t>(codec), static_cast<uint8_t>(count ? 1 : 0)};
  if (count) {
    for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(*count >> (8 * i)));
  }
  out.push_back(cut);
  out.insert(out.end(), payload.begin(), payload.end());
  return out;
}

void write_codec_seeds(const std::string& dir) {
  const float big = std::numeric_limits<float>::max();
  std::vector<float> values(300);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i % 23) * 0.25f - 2.5f;
  std::vector<float> extreme = values;
  extreme[0] = big;  // near FLT_MAX the quantized codecs saturate at their largest scale
  extreme[299] = -big;
  for (Codec codec : {Codec::fp32, Codec::bf16, Codec::int8, Codec::int4_e2m1, Codec::int4_uniform}) {
    const std::string name = codec_name(codec);
    std::vector<uint8_t> bytes;
    (void)encode_tensor(codec, values.data(), values.size(), bytes);
    write(dir + "/tensor_codec/" + name, codec_seed(codec, bytes, 3));
    const uint32_t count = static_cast<uint32_t>(values.size());
    write(dir + "/tensor_codec/" + name + "_counted", codec_seed(codec, bytes, 1, &count));
    (void)encode_tensor(codec, extreme.data(), extreme.size(), bytes);
    write(dir + "/tensor_codec/" + name + "_extreme", codec_seed(codec, bytes, 2));
    if (codec == Codec::fp32 || codec == Codec::bf16) continue;
    // A finite scale so large that codes times it overflow: decode must refuse it.
    const float huge = 3e38f;
    std::memcpy(bytes.data() + 4, &huge, 4);
    write(dir + "/tensor_codec/" + name + "_huge_scale", codec_seed(codec, bytes, 0));
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  const std::vector<float> small = {0.5f, -1.0f, 2.0f, 3.0f, -4.0f};
  auto bytes = std::make_shared<std::vector<uint8_t>>();
  (void)encode_tensor(Codec::int8, small.data(), small.size(), *bytes);
  TensorChunk chunk = (*split_tensor(Codec::int8, small.size(), ByteView{bytes->data(), bytes->size(), bytes}))[0];

  const std::vector<std::pair<std::string, Message>> seeds = {
      {"join", Join{"learner-0", "node-a", "site-1", "cpu", 11000.0, "secret"}},
      {"welcome", Welcome{3, 4, true, ""}},
      {"fragment_update", FragmentUpdate{"learner-0", 1, 3, 100, 204800, 3.25f, chunk}},
      {"global_fragment", GlobalFragment{1, 4, chunk}},
      {"heartbeat", Heartbeat{"learner-0", 12, 9000.5}},
      {"persist", Persist{4, 1, PersistKind::parameters, chunk, "{\"contributors\":2}"}},
      {"persisted", Persisted{4, true, ""}},
      {"leave", Leave{"learner-0", "shutdown"}},
      {"admin_request", AdminRequest{7, "kill", {"learner-0"}}},
      {"admin_reply", AdminReply{7, true, "ok", "{}"}},
      {"fetch", Fetch{"learner-0", {1, 2, 3, 4}}},
      {"restore", Restore{1}},
      {"admin_command", AdminCommand{2, AdminVerb::learners}},
      {"commit_end", CommitEnd{4, "{\"contributors\":2}"}},
      {"slot_report", SlotReport{"learner-0", SlotState::running, 2, 1, 77, 10.5, 10.0, 1.0, 8.0, 0.5, 0, 0.25}},
      {"learner_control", LearnerControl{3, ControlAction::pause_learner, "learner-0"}},
      {"learner_control_throttle", LearnerControl{4, ControlAction::throttle_learner, "learner-1", 3.0}},
  };
  for (const auto& [name, message] : seeds) write(dir + "/envelope/" + name, envelope_bytes(message));

  const std::vector<uint8_t> marker = {'C', 'H', 'N', 'K'};
  int stream = 0;
  for (auto [codec, elements] : {std::pair{Codec::fp32, size_t{40}}, std::pair{Codec::int4_e2m1, size_t{300}}}) {
    auto pieces = chunk_envelopes(codec, elements);
    std::vector<uint8_t> in_order, reversed;
    for (size_t i = 0; i < pieces.size(); ++i) {
      auto& a = pieces[i];
      auto& b = pieces[pieces.size() - 1 - i];
      in_order.insert(in_order.end(), a.begin(), a.end());
      reversed.insert(reversed.end(), b.begin(), b.end());
      if (i + 1 < pieces.size()) {
        in_order.insert(in_order.end(), marker.begin(), marker.end());
        reversed.insert(reversed.end(), marker.begin(), marker.end());
      }
    }
    write(dir + "/reassembler/stream" + std::to_string(stream++), in_order);
    write(dir + "/reassembler/stream" + std::to_string(stream++), reversed);
  }
  write_codec_seeds(dir);
  return 0;
}
