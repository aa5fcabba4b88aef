// The learner checkpoint file: round trip, and every kind of bad file refused with its reason.
#include <cmath>
#include <filesystem>
#include <fstream>

#include <doctest/doctest.h>

#include "actors/learner_checkpoint.hpp"
#include "common/files.hpp"
#include "test_support.hpp"

using namespace archipelago;
using namespace archipelago::actors;

namespace {

LearnerCheckpoint sample() {
  LearnerCheckpoint c;
  c.step = 42;
  c.incarnation = 3;
  c.optimizer.schedule_steps = 42;
  c.optimizer.adam_steps = 40;
  c.optimizer.exp_avg = {0.1f, -0.2f, 0.3f, 0.4f, 0.5f};
  c.optimizer.exp_avg_sq = {1e-4f, 2e-4f, 3e-4f, 4e-4f, 5e-4f};
  c.fragments.resize(2);
  c.fragments[0] = {7, 39, 3, 1536, 12.5, 0.75, {0.01f, -0.02f, 0.03f}};
  c.fragments[1] = {6, 34, 8, 4096, 30.25, 1.5, {0.5f, -0.5f}};
  return c;
}

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

}  // namespace

TEST_CASE("learner checkpoint: round trip, and bad files are refused with the reason") {
  const auto dir = testing::fresh_dir("learner-checkpoint");
  std::filesystem::create_directories(dir);
  const auto path = learner_checkpoint_path(dir, "learner-0");
  const std::vector<int64_t> sizes = {3, 2};
  const auto written = sample();
  REQUIRE(save_learner_checkpoint(path, written, true).ok());
  CHECK_FALSE(std::filesystem::exists(partial_path(path)));  // renamed into place

  auto read = load_learner_checkpoint(path, 5, sizes);
  REQUIRE_MESSAGE(read.ok(), (read.ok() ? "" : read.error().to_string()));
  CHECK(read->step == 42);
  CHECK(read->incarnation == 3);
  CHECK(read->optimizer.adam_steps == 40);
  CHECK(read->optimizer.exp_avg == written.optimizer.exp_avg);
  CHECK(read->optimizer.exp_avg_sq == written.optimizer.exp_avg_sq);
  REQUIRE(read->fragments.size() == 2);
  CHECK(read->fragments[1].version == 6);
  CHECK(read->fragments[1].since_step == 34);
  CHECK(read->fragments[0].since_step == 39);
  CHECK(read->fragments[1].compute_s == 1.5);
  CHECK(read->fragments[1].steps == 8);
  CHECK(read->fragments[1].tokens == 4096);
  CHECK(read->fragments[1].loss_sum == 30.25);
  CHECK(read->fragments[0].unsent == written.fragments[0].unsent);

  // A checkpoint taken before any AdamW step has no moments.
  auto fresh = written;
  fresh.optimizer = {};
  REQUIRE(save_learner_checkpoint(path, fresh, false).ok());
  auto fresh_read = load_learner_checkpoint(path, 5, sizes);
  REQUIRE(fresh_read.ok());
  CHECK(fresh_read->optimizer.exp_avg.empty());

  REQUIRE(save_learner_checkpoint(path, written, false).ok());
  const std::string good = file_bytes(path);

  SUBCASE("a flipped byte") {
    auto bad = good;
    bad[bad.size() / 2] ^= 0x40;
    write_bytes(path, bad);
    auto r = load_learner_checkpoint(path, 5, sizes);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == ErrorCode::corrupt);
  }
  SUBCASE("a truncated file") {
    write_bytes(path, good.substr(0, 5));
    auto r = load_learner_checkpoint(path, 5, sizes);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == ErrorCode::truncated);
  }
  SUBCASE("another model layout") {
    auto r = load_learner_checkpoint(path, 5, {2, 3});
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == ErrorCode::inconsistent);
    auto fewer = load_learner_checkpoint(path, 5, {5});
    REQUIRE_FALSE(fewer.ok());
    CHECK(fewer.error().code == ErrorCode::inconsistent);
    auto params = load_learner_checkpoint(path, 6, sizes);
    REQUIRE_FALSE(params.ok());
    CHECK(params.error().code == ErrorCode::inconsistent);
  }
  SUBCASE("work that begins after the checkpoint's step") {
    auto later = written;
    later.fragments[1].since_step = later.step + 1;
    REQUIRE(save_learner_checkpoint(path, later, false).ok());
    auto r = load_learner_checkpoint(path, 5, sizes);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == ErrorCode::inconsistent);
  }
  SUBCASE("a NaN in the saved work") {
    auto nan = written;
    nan.fragments[0].unsent[1] = std::nanf("");
    REQUIRE(save_learner_checkpoint(path, nan, false).ok());
    auto r = load_learner_checkpoint(path, 5, sizes);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == ErrorCode::non_finite);
  }
  SUBCASE("no file") {
    auto r = load_learner_checkpoint(dir + "/absent.ckpt", 5, sizes);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == ErrorCode::not_found);
  }
  SUBCASE("an unwritable directory") {
    CHECK_FALSE(save_learner_checkpoint(dir + "/no/such/dir/x.ckpt", written, false).ok());
  }
  std::filesystem::remove_all(dir);
}
