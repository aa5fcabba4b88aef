// Using a trained model as a user does, on runs that `archipelago train` just made: `sample` (a
// seeded sample is the same text twice, `train` printed one of its final version, bad input exits 2
// with its reason, a damaged store blob is refused with the version named), `eval` (a version and
// its export score alike, in bits per byte too) and `--init-from` (a run started from an export
// begins at the exported version's held-out loss; a mis-shaped export is refused naming the tensor).
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "../storage/test_support.hpp"
#include "../support/run_cli.hpp"

namespace {

using archipelago::testing::last_line_json;
using archipelago::testing::run_cli;

const std::string kTiny =
    " --set model.preset=tiny --set data.tokenizer=bytes --set train.learners=2 --set inner.batch_size=8"
    " --set train.inner_steps=10"
    " --set train.max_seconds=0 --set train.threads=1 --set runtime.store_sync=false --set data.eval_batches=2"
    " --set data.cache_dir=" + (std::filesystem::temp_directory_path() / "archipelago-test-data").string();

}  // namespace

TEST_CASE("sample: a seeded sample is the same text twice, train prints one, bad input and damage are refused") {
  const auto dir = std::filesystem::temp_directory_path() / "archipelago-sample-test";
  std::filesystem::remove_all(dir);
  const std::string run_dir = (dir / "run").string();
  auto train = run_cli("train --json --run-dir " + run_dir + kTiny + " --set train.max_tokens=81920", 240);
  CAPTURE(train.out);
  REQUIRE(train.exit_code == 0);
  const auto summary = last_line_json(train.out);
  const uint64_t final_version = summary["final_version"].get<uint64_t>();
  REQUIRE(final_version >= 2);
  // train's summary carries a sample of its final version.
  REQUIRE(summary.contains("sample"));
  CHECK(summary["sample"]["version"] == final_version);
  CHECK(summary["sample"]["text"].get<std::string>().size() > 0);

  auto sample = [&](const std::string& options) {
    auto outcome = run_cli("sample --json --run-dir " + run_dir + " --tokens 48 " + options, 60);
    CAPTURE(outcome.out);
    REQUIRE(outcome.exit_code == 0);
    return last_line_json(outcome.out);
  };
  const auto first = sample("--seed 7 --prompt 'The '");
  const auto again = sample("--seed 7 --prompt 'The '");
  const auto other = sample("--seed 8 --prompt 'The '");
  CHECK(first["version"] == final_version);
  CHECK(first["tokens"] == 48);
  CHECK(first["kv_cache"] == true);
  CHECK(first["text"] == again["text"]);
  CHECK(first["text"] != other["text"]);
  // An earlier version is asked for by number (retention keeps the newest 20).
  const auto earlier = sample("--version " + std::to_string(final_version - 1) + " --temperature 0");
  CHECK(earlier["version"] == final_version - 1);

  auto refused = [&](const std::string& arguments, int code, const std::string& reason) {
    auto outcome = run_cli("sample " + arguments, 60);
    CAPTURE(arguments);
    CAPTURE(outcome.out);
    CHECK(outcome.exit_code == code);
    CHECK(outcome.out.find(reason) != std::string::npos);
  };
  refused("--run-dir " + (dir / "nowhere").string(), 2, "no run directory");
  refused("--run-dir " + run_dir + " --version 999999", 2, "version 999999 is not a committed version");
  refused("--run-dir " + run_dir + " --top-p 0", 2, "--top-p must be in (0, 1]");
  refused("--run-dir " + run_dir + " --temperature -1", 2, "--temperature must be");

  // Every stored blob damaged in place: the version is refused by its checksums, and named.
  namespace st = archipelago::storage;
  const std::string store = run_dir + "/store";
  size_t damaged = 0;
  REQUIRE(st::testing::with_raw_db(store, [&](rocksdb::DB& db, auto& handles, const auto& descriptors) {
            auto* blobs = st::testing::family(handles, descriptors, st::kBlobsFamily);
            std::unique_ptr<rocksdb::Iterator> it(db.NewIterator(rocksdb::ReadOptions(), blobs));
            std::vector<std::pair<std::string, std::string>> changed;
            for (it->SeekToFirst(); it->Valid(); it->Next()) {
              std::string value = it->value().ToString();
              value[value.size() / 2] ^= 0x40;
              changed.emplace_back(it->key().ToString(), value);
            }
            for (const auto& [key, value] : changed) damaged += db.Put(rocksdb::WriteOptions(), blobs, key, value).ok();
          }).ok());
  REQUIRE(damaged > 0);
  refused("--run-dir " + run_dir + " --version " + std::to_string(final_version), 1,
          "version " + std::to_string(final_version) + " does not verify");
  std::filesystem::remove_all(dir);
}

TEST_CASE("eval and --init-from: an export scores as its version does, and a run started from it begins at its loss") {
  const auto dir = std::filesystem::temp_directory_path() / "archipelago-init-from-test";
  std::filesystem::remove_all(dir);
  const std::string run_dir = (dir / "run").string(), exported = (dir / "export").string();
  auto train = run_cli("train --json --no-sample --run-dir " + run_dir + kTiny + " --set train.max_tokens=81920", 240);
  CAPTURE(train.out);
  REQUIRE(train.exit_code == 0);
  const auto first = last_line_json(train.out);
  CHECK_FALSE(first.contains("sample"));  // --no-sample
  CHECK(first["heldout_bits_per_byte"].get<double>() ==
        doctest::Approx(first["heldout_loss"].get<double>() / std::log(2.0)).epsilon(1e-9));
  const uint64_t version = first["final_version"].get<uint64_t>();
  REQUIRE(run_cli("export --run-dir " + run_dir + " --out " + exported, 60).exit_code == 0);

  // eval: the version and its export on the same text, in nats and in bits per byte (bytes: loss / ln 2).
  const std::string text = (dir / "text.txt").string();
  {
    std::ofstream out(text);
    for (int i = 0; i < 200; ++i) out << "In the beginning was the word, and the word was with the text " << i << ".\n";
  }
  auto eval = [&](const std::string& model) {
    auto outcome = run_cli("eval --json --text " + text + " " + model, 60);
    CAPTURE(outcome.out);
    REQUIRE(outcome.exit_code == 0);
    return last_line_json(outcome.out);
  };
  const auto stored = eval("--run-dir " + run_dir);
  const auto from_export = eval("--export " + exported);
  CHECK(stored["version"] == version);
  CHECK(from_export["version"] == version);
  CHECK(stored["tokens"].get<int64_t>() == static_cast<int64_t>(std::filesystem::file_size(text)) - 1);
  CHECK(from_export["loss"].get<double>() == doctest::Approx(stored["loss"].get<double>()).epsilon(1e-6));
  CHECK(stored["bits_per_byte"].get<double>() ==
        doctest::Approx(stored["loss"].get<double>() / std::log(2.0)).epsilon(1e-9));
  {
    auto not_export = run_cli("eval --text " + text + " --export " + run_dir, 60);
    CHECK(not_export.exit_code == 2);
    CHECK(not_export.out.find("is not an export") != std::string::npos);
  }

  // A new run from the export starts where the exported version ended: its first held-out loss
  // (same held-out text) is the one the first run measured for that version.
  auto resumed = run_cli("train --json --no-sample --run-dir " + (dir / "second").string() + kTiny +
                             " --set train.max_tokens=8192 --init-from " + exported,
                         240);
  CAPTURE(resumed.out);
  REQUIRE(resumed.exit_code == 0);
  const auto second = last_line_json(resumed.out);
  CHECK(second["initial_heldout_loss"].get<double>() == doctest::Approx(first["heldout_loss"].get<double>()).epsilon(1e-6));
  // A model of another shape is refused, naming the tensor.
  auto refused = run_cli("train --run-dir " + (dir / "third").string() + kTiny +
                             " --set model.preset=small --set train.max_tokens=8192 --init-from " + exported,
                         60);
  CHECK(refused.exit_code == 2);
  CHECK(refused.out.find("tensor token_embedding.weight is [256, 64] in the export") != std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST_CASE("tokenizer: a SentencePiece model round-trips the corpus, trains a run, and travels with its export") {
  const auto dir = std::filesystem::temp_directory_path() / "archipelago-tokenizer-test";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string model = (dir / "kjv-512.model").string(), run_dir = (dir / "run").string(),
                    exported = (dir / "export").string();
  const std::string cache = (std::filesystem::temp_directory_path() / "archipelago-test-data").string();

  // Trained on the whole corpus; the command checks that every book decodes back to its bytes.
  auto trained = run_cli("tokenizer train --json --corpus kjv --vocab 512 --out " + model + " --cache-dir " + cache, 240);
  CAPTURE(trained.out);
  REQUIRE(trained.exit_code == 0);
  const auto made = last_line_json(trained.out);
  CHECK(made["round_trip"] == true);
  CHECK(made["vocab"] == 512);
  CHECK(made["bytes_per_token"].get<double>() > 1.5);  // subwords: fewer tokens than bytes
  {
    auto bad = run_cli("tokenizer train --corpus kjv --vocab 100 --out " + (dir / "x.model").string() + " --cache-dir " + cache, 60);
    CHECK(bad.exit_code == 2);
    CHECK(bad.out.find("--vocab must be in") != std::string::npos);
  }

  // A file that is not a SentencePiece model is refused before anything runs, with exit code 2.
  const std::string garbage = (dir / "garbage.model").string();
  std::ofstream(garbage) << "this is not a model";
  auto refused = run_cli("train --run-dir " + (dir / "refused").string() + kTiny +
                             " --set train.max_tokens=8192 --set data.tokenizer='\"spm:" + garbage + "\"'",
                         60);
  CHECK(refused.exit_code == 2);
  CHECK(refused.out.find("is not a SentencePiece model") != std::string::npos);

  // A run on it: the model's vocabulary is the tokenizer's, and bits per byte is the held-out loss ÷
  // (ln 2 × the held-out tokens' bytes per token). 80 inner steps per learner, as the runs above: with
  // 40 the final loss ranged from 5.30 to 6.32 against an initial 6.254 (a run's last outer steps can
  // undo its gain), with 80 it was 4.94–4.98 in three runs (~3 s each).
  auto train = run_cli("train --json --run-dir " + run_dir + kTiny +
                           " --set train.max_tokens=81920 --set data.tokenizer='\"spm:" + model + "\"'",
                       240);
  CAPTURE(train.out);
  REQUIRE(train.exit_code == 0);
  const auto summary = last_line_json(train.out);
  CHECK(summary["tokenizer"]["kind"] == "spm");
  CHECK(summary["tokenizer"]["vocab"] == 512);
  CHECK(summary["tokenizer"]["hash"] == made["hash"]);
  const double bytes_per_token = summary["tokenizer"]["heldout_bytes_per_token"].get<double>();
  CHECK(bytes_per_token > 1.5);
  CHECK(summary["heldout_bits_per_byte"].get<double>() ==
        doctest::Approx(summary["heldout_loss"].get<double>() / (std::log(2.0) * bytes_per_token)).epsilon(1e-9));
  CHECK(summary["heldout_loss"].get<double>() < summary["initial_heldout_loss"].get<double>());
  CHECK(std::filesystem::exists(run_dir + "/tokenizer.model"));  // the run keeps its own copy
  CHECK(summary["sample"]["text"].get<std::string>().size() > 0);

  // The export carries the tokenizer; SentencePiece's own Python binding loads it, counts the same
  // tokens in a text as `eval` does, and restores the text exactly.
  REQUIRE(run_cli("export --run-dir " + run_dir + " --out " + exported, 60).exit_code == 0);
  REQUIRE(std::filesystem::exists(exported + "/tokenizer.model"));
  const std::string text = (dir / "text.txt").string();
  {
    std::ofstream out(text);
    for (int i = 0; i < 100; ++i) out << "And God said, Let there be light: and there was light " << i << ".\n";
  }
  auto eval = run_cli("eval --json --text " + text + " --export " + exported, 60);
  CAPTURE(eval.out);
  REQUIRE(eval.exit_code == 0);
  const auto score = last_line_json(eval.out);
  const auto file_bytes = static_cast<int64_t>(std::filesystem::file_size(text));
  // Every token but the first is predicted: the bytes they cover are the file's but the first token's.
  CHECK(score["bytes"].get<int64_t>() < file_bytes);
  CHECK(score["bytes"].get<int64_t>() >= file_bytes - 16);
  CHECK(score["bits_per_byte"].get<double>() ==
        doctest::Approx(score["loss"].get<double>() * score["tokens"].get<double>() /
                        (std::log(2.0) * score["bytes"].get<double>())).epsilon(1e-9));
  const std::string python =
      "import sentencepiece as s, sys; p = s.SentencePieceProcessor(model_file=sys.argv[1]); "
      "t = open(sys.argv[2], 'rb').read().decode(); ids = p.encode(t); "
      "assert p.decode(ids) == t, 'no round trip'; print(len(ids))";
  // Debian's interpreter, where python3-sentencepiece installs (not whatever python3 is first on PATH).
  FILE* pipe = popen(("timeout 60 /usr/bin/python3 -c \"" + python + "\" " + exported + "/tokenizer.model " + text).c_str(), "r");
  REQUIRE(pipe != nullptr);
  char line[64] = {0};
  const bool read = std::fgets(line, sizeof line, pipe) != nullptr;
  CHECK(pclose(pipe) == 0);
  REQUIRE(read);
  CHECK(std::stoll(line) == score["tokens"].get<int64_t>() + 1);

  // A run may start from the export only with the export's tokenizer: another vocabulary of the same
  // size (here a unigram model of 512 pieces) would load every tensor, and is refused by name.
  const std::string unigram = (dir / "kjv-512-unigram.model").string();
  REQUIRE(run_cli("tokenizer train --corpus kjv --vocab 512 --type unigram --out " + unigram + " --cache-dir " + cache, 240)
              .exit_code == 0);
  auto mismatched = run_cli("train --run-dir " + (dir / "mismatched").string() + kTiny + " --set train.max_tokens=8192" +
                                " --set data.tokenizer='\"spm:" + unigram + "\"' --init-from " + exported,
                            60);
  CHECK(mismatched.exit_code == 2);
  CHECK(mismatched.out.find("the export's tokenizer is " + made["hash"].get<std::string>()) != std::string::npos);
  auto matched = run_cli("train --json --no-sample --run-dir " + (dir / "matched").string() + kTiny +
                             " --set train.max_tokens=8192 --set data.tokenizer='\"spm:" + model + "\"' --init-from " + exported,
                         120);
  CAPTURE(matched.out);
  CHECK(matched.exit_code == 0);

  // A run directory resumes and samples with its own tokenizer even when the file it named is gone.
  std::filesystem::remove(model);
  auto sample = run_cli("sample --json --run-dir " + run_dir + " --tokens 20 --seed 3", 60);
  CAPTURE(sample.out);
  REQUIRE(sample.exit_code == 0);
  CHECK(last_line_json(sample.out)["tokens"] == 20);
  std::filesystem::remove_all(dir);
}

TEST_CASE("data.tokenizer = bpe:N trains a vocabulary on the run's corpus once, caches it, and refuses a bad N") {
  const auto dir = std::filesystem::temp_directory_path() / "archipelago-bpe-test";
  std::filesystem::remove_all(dir);
  const std::string cache = (dir / "cache").string();
  std::filesystem::create_directories(cache);
  // The corpus: a text file of its own, so that the cache starts empty.
  const std::string corpus = (dir / "corpus.txt").string();
  {
    std::ofstream out(corpus);
    for (int i = 0; i < 3000; ++i) out << "Verse " << i << ": the word was with the text, and the text was good.\n";
  }
  const std::string run = "train --json --no-sample" + kTiny + " --set train.max_tokens=8192 --set data.cache_dir=" + cache +
                          " --set data.corpus=" + corpus + " --set data.tokenizer=bpe:300 --run-dir ";
  auto first = run_cli(run + (dir / "first").string(), 120);
  CAPTURE(first.out);
  REQUIRE(first.exit_code == 0);
  const auto summary = last_line_json(first.out);
  CHECK(summary["tokenizer"]["kind"] == "spm");
  CHECK(summary["tokenizer"]["vocab"] == 300);
  std::vector<std::string> cached;
  for (const auto& entry : std::filesystem::directory_iterator(cache)) cached.push_back(entry.path().filename().string());
  REQUIRE(cached.size() == 1);
  CHECK(cached[0].find("-bpe300.model") != std::string::npos);
  const auto written = std::filesystem::last_write_time(std::filesystem::path(cache) / cached[0]);
  // A second run of the same corpus and N takes the cached model (the file is not written again).
  auto second = run_cli(run + (dir / "second").string(), 120);
  REQUIRE(second.exit_code == 0);
  CHECK(last_line_json(second.out)["tokenizer"]["hash"] == summary["tokenizer"]["hash"]);
  CHECK(std::filesystem::last_write_time(std::filesystem::path(cache) / cached[0]) == written);
  for (const std::string bad : {"bpe:100", "bpe:lots", "sentencepiece"}) {
    auto refused = run_cli("train" + kTiny + " --set train.max_tokens=8192 --set data.tokenizer=" + bad + " --run-dir " +
                               (dir / "refused").string(),
                           60);
    CAPTURE(bad);
    CAPTURE(refused.out);
    CHECK(refused.exit_code == 2);
    CHECK(refused.out.find("data.tokenizer") != std::string::npos);
  }
  std::filesystem::remove_all(dir);
}
