// diloco/screening: the median, the verdicts of each mode, the mode names and the steps an update's norm is taken over.
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "diloco/screening.hpp"

using namespace archipelago::diloco;

TEST_CASE("screening: the median of the known figures, whatever their order") {
  CHECK(Screening::median({}) == 0);
  CHECK(Screening::median({5}) == 5);
  CHECK(Screening::median({9, 1, 4}) == 4);
  CHECK(Screening::median({8, 2, 6, 4}) == doctest::Approx(5));  // the mean of the two middle ones
  CHECK(Screening::median({1, 1, 100}) == 1);                     // one outsized figure does not move it
}

TEST_CASE("screening: hold, pass, clip and refuse by the ratio to the median") {
  Screening refuse;  // clip 16, refuse 64
  CHECK(refuse.judge(1e9, {1, 1}).action == Screening::Action::hold);  // fewer than kMinKnown
  const std::vector<double> known{1, 2, 3};                            // median 2
  auto pass = refuse.judge(20, known);
  CHECK(pass.action == Screening::Action::pass);
  CHECK(pass.ratio == doctest::Approx(10));
  CHECK(pass.scale == 1);
  auto clip = refuse.judge(64, known);  // 32 medians
  CHECK(clip.action == Screening::Action::clip);
  CHECK(clip.scale == doctest::Approx(0.5));  // down to 16 medians
  CHECK(refuse.judge(130, known).action == Screening::Action::refuse);  // 65 medians
  CHECK(refuse.judge(128, known).action == Screening::Action::clip);    // 64 medians: the bound itself is not past it

  Screening clip_only;
  clip_only.mode = Screening::Mode::clip;
  auto huge = clip_only.judge(2e6, known);
  CHECK(huge.action == Screening::Action::clip);  // clip never refuses
  CHECK(huge.scale == doctest::Approx(16.0 / 1e6));

  Screening none;
  none.mode = Screening::Mode::none;
  CHECK(none.judge(1e9, known).action == Screening::Action::pass);
  CHECK(none.judge(1e9, {}).action == Screening::Action::pass);  // not even held

  auto zeros = refuse.judge(5, {0, 0, 0});  // zero updates: nothing to compare with
  CHECK(zeros.action == Screening::Action::pass);
  CHECK(zeros.ratio == 0);
}

TEST_CASE("screening: outer.screen's names parse and print back, others are refused") {
  for (auto mode : {Screening::Mode::none, Screening::Mode::clip, Screening::Mode::refuse}) {
    auto parsed = parse_screen_mode(screen_mode_name(mode));
    REQUIRE(parsed.ok());
    CHECK(*parsed == mode);
  }
  auto unknown = parse_screen_mode("drop");
  REQUIRE_FALSE(unknown.ok());
  CHECK(unknown.error().reason.find("'drop'") != std::string::npos);
}

TEST_CASE("screening: the steps an update's norm is divided over, bounded by its credited steps") {
  struct Row {
    uint64_t from, to;
    int64_t credited;
    int64_t first, count;
  };
  const Row rows[] = {
      {0, 10, 10, 0, 10},    // the span it claims
      {10, 14, 10, 10, 4},   // a shorter span than credited: the span
      {0, 100, 10, 90, 10},  // a longer span than credited: the last credited steps before to_step
      {20, 20, 5, 15, 5},    // no span: its credited steps, ending at to_step
      {5, 2, 10, 0, 10},     // no span, near the start: from step 0, never below
      {0, 0, 0, 0, 1},       // at least one step
  };
  for (const auto& r : rows) {
    CAPTURE(r.from);
    CAPTURE(r.to);
    CAPTURE(r.credited);
    const auto steps = screened_steps(r.from, r.to, r.credited);
    CHECK(steps.first == r.first);
    CHECK(steps.count == r.count);
  }
}
