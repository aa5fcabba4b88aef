// The C++ side of the export check: the logits of one committed version of a run, computed by the
// training core's own model (training::Replica) from the run's store, for a fixed token sequence.
//
// Usage: export_logits --run-dir R --version V --out DIR
//
// DIR/tokens.u8    seq_len token bytes (a fixed text, repeated to the model's context length)
// DIR/logits.f32   seq_len × vocab little-endian float32, row-major: the logits at each position
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "run/run_setup.hpp"
#include "apps/config.hpp"

using namespace archipelago;

namespace {

int fail(const std::string& message) {
  std::fprintf(stderr, "export_logits: %s\n", message.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string run_dir, out_dir;
  long long version = -1;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--run-dir") run_dir = argv[i + 1];
    else if (flag == "--out") out_dir = argv[i + 1];
    else if (flag == "--version") version = std::atoll(argv[i + 1]);
    else return fail("unknown option " + flag);
  }
  if (run_dir.empty() || out_dir.empty() || version < 0 || argc != 7) {
    return fail("usage: export_logits --run-dir R --version V --out DIR");
  }
  auto runtime = apps::stored_run_options(run_dir);
  if (!runtime) return fail(runtime.error().reason);
  runtime->setup.run.device = "cpu";
  training::set_compute_threads(1);
  auto start = run::build_model_start(runtime->setup, /*apply_init_from=*/false);
  if (!start) return fail(start.error().reason);
  auto store = run::open_run_store(*runtime);
  if (!store) return fail(store.error().reason);
  auto data = (*store)->get(static_cast<uint64_t>(version));
  if (!data) return fail(data.error().reason);
  auto flat = run::flat_parameters(*start->layout, *data);
  if (!flat) return fail(flat.error().reason);
  start->replica->write_parameters(*flat);

  const std::string text_in = "In the beginning God created the heaven and the earth. And the earth was without form, and void. ";
  std::vector<training::Token> tokens;
  while (static_cast<int>(tokens.size()) < runtime->setup.model.seq_len) {
    tokens.push_back(static_cast<unsigned char>(text_in[tokens.size() % text_in.size()]));
  }
  const auto logits = start->replica->logits(tokens);
  std::filesystem::create_directories(out_dir);
  std::ofstream tokens_out(std::filesystem::path(out_dir) / "tokens.u8", std::ios::binary);
  const std::vector<uint8_t> token_bytes(tokens.begin(), tokens.end());  // byte-level: one byte a token
  tokens_out.write(reinterpret_cast<const char*>(token_bytes.data()), static_cast<std::streamsize>(token_bytes.size()));
  std::ofstream logits_out(std::filesystem::path(out_dir) / "logits.f32", std::ios::binary);
  logits_out.write(reinterpret_cast<const char*>(logits.data()), static_cast<std::streamsize>(logits.size() * sizeof(float)));
  if (!tokens_out || !logits_out) return fail("cannot write to " + out_dir);
  std::printf("export_logits: version %lld, %zu tokens, %zu logits -> %s\n", version, tokens.size(), logits.size(), out_dir.c_str());
  return 0;
}
