// Writes the seed corpus of the fuzz targets: a few valid encoded messages of every kind
// (envelope/) and chunk streams separated by the "CHNK" marker (reassembler/).
// Usage: messages_fuzz_corpus <repo>/tests/fuzz/corpus   (rerun only when the schema changes)
#include <cstdio>
#include <fstream>
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
  return 0;
}
