// Merge rules and outer optimizers on hand-computed cases.
#include <algorithm>
#include <cmath>
#include <random>

#include <doctest/doctest.h>

#include "training/outer.hpp"

using namespace archipelago::training;

namespace {

double norm(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += double(x) * x;
  return std::sqrt(s);
}

}  // namespace

TEST_CASE("token-weighted mean on a hand-computed case") {
  std::vector<float> a{1, 0}, b{0, 2};
  // w = tokens · tokens / steps: 100·10 = 1000 and 200·20 = 4000.
  std::vector<Contribution> c{{a.data(), 100, 10}, {b.data(), 200, 10}};
  auto weights = merge_weights(c, MergeRule::token_weighted);
  CHECK(weights[0] == doctest::Approx(1000));
  CHECK(weights[1] == doctest::Approx(4000));
  auto merged = merge(c, 2, MergeRule::token_weighted);
  REQUIRE(merged.ok());
  CHECK((*merged)[0] == doctest::Approx(0.2));
  CHECK((*merged)[1] == doctest::Approx(1.6));
  auto mean = merge(c, 2, MergeRule::mean);
  CHECK((*mean)[0] == doctest::Approx(0.5));
  CHECK((*mean)[1] == doctest::Approx(1.0));
}

TEST_CASE("RDA on a hand-computed case, and its norm is the weighted mean of the norms") {
  std::vector<float> a{1, 0}, b{0, 2};
  std::vector<Contribution> c{{a.data(), 100, 10}, {b.data(), 200, 10}};
  auto merged = merge(c, 2, MergeRule::rda);
  REQUIRE(merged.ok());
  // norm: (1000·1 + 4000·2) / 5000 = 1.8; direction: (1000, 4000) / ‖·‖.
  const double d = std::sqrt(1000.0 * 1000 + 4000.0 * 4000);
  CHECK((*merged)[0] == doctest::Approx(1.8 * 1000 / d));
  CHECK((*merged)[1] == doctest::Approx(1.8 * 4000 / d));

  std::mt19937 rng(3);
  std::normal_distribution<float> gauss;
  for (int trial = 0; trial < 5; ++trial) {
    const int n = 1000, M = 4;
    std::vector<std::vector<float>> deltas(M, std::vector<float>(n));
    std::vector<Contribution> contributions;
    double weighted_norms = 0, weight_sum = 0;
    for (int m = 0; m < M; ++m) {
      for (auto& x : deltas[m]) x = gauss(rng) * (m + 1);
      contributions.push_back({deltas[m].data(), 1000 * (m + 1), 10 + m});
    }
    auto weights = merge_weights(contributions, MergeRule::rda);
    for (int m = 0; m < M; ++m) {
      weighted_norms += weights[m] * norm(deltas[m]);
      weight_sum += weights[m];
    }
    auto rda = merge(contributions, n, MergeRule::rda);
    auto mean = merge(contributions, n, MergeRule::token_weighted);
    CHECK(norm(*rda) == doctest::Approx(weighted_norms / weight_sum).epsilon(1e-5));
    CHECK(norm(*mean) < norm(*rda));  // nearly orthogonal Δ: the plain mean shrinks
  }
}

TEST_CASE("merge refuses empty input and zero weights") {
  std::vector<float> a{1};
  CHECK_FALSE(merge({}, 1, MergeRule::mean).ok());
  CHECK_FALSE(merge({{a.data(), 0, 0}}, 1, MergeRule::token_weighted).ok());
  CHECK_FALSE(parse_merge_rule("median").ok());
}

TEST_CASE("Delayed Nesterov with N=1 is Nesterov, with N arrivals it is one Nesterov step on their mean") {
  std::mt19937 rng(5);
  std::normal_distribution<float> gauss;
  const int n = 64;
  std::vector<float> start(n);
  for (auto& x : start) x = gauss(rng);

  auto nesterov_params = start, delayed_params = start;
  NesterovOuter nesterov(n, 0.7, 0.9);
  DelayedNesterovOuter delayed(n, 0.7, 0.9, 1);
  for (int step = 0; step < 6; ++step) {
    std::vector<float> delta(n);
    for (auto& x : delta) x = gauss(rng);
    nesterov.step(nesterov_params.data(), delta.data());
    delayed.step(delayed_params.data(), delta.data());
  }
  for (int i = 0; i < n; ++i) CHECK(delayed_params[i] == doctest::Approx(nesterov_params[i]).epsilon(1e-5));

  // N = 4 arrivals of Δ_1..Δ_4 == one Nesterov step on their mean.
  auto grouped = start, reference = start;
  DelayedNesterovOuter every4(n, 0.7, 0.9, 4);
  NesterovOuter once(n, 0.7, 0.9);
  std::vector<float> mean(n, 0.0f);
  for (int k = 0; k < 4; ++k) {
    std::vector<float> delta(n);
    for (auto& x : delta) x = gauss(rng);
    for (int i = 0; i < n; ++i) mean[i] += delta[i] / 4;
    every4.step(grouped.data(), delta.data());
    CHECK(every4.pending() == (k + 1) % 4);
  }
  once.step(reference.data(), mean.data());
  for (int i = 0; i < n; ++i) CHECK(grouped[i] == doctest::Approx(reference[i]).epsilon(1e-5));
}

TEST_CASE("outer-momentum warm-up: mu ramps linearly over the first W momentum updates, then stays") {
  CHECK(warmed_momentum(0.9, 0, 0) == 0.9);
  CHECK(warmed_momentum(0.9, 4, 0) == doctest::Approx(0.225));
  CHECK(warmed_momentum(0.9, 4, 1) == doctest::Approx(0.45));
  CHECK(warmed_momentum(0.9, 4, 3) == 0.9);
  CHECK(warmed_momentum(0.9, 4, 100) == 0.9);
  CHECK(warmed_momentum(0.9, 1, 0) == 0.9);

  // The optimizer against the rule written out in doubles: m <- mu_k m + d; theta <- theta - lr (d + mu_k m).
  std::mt19937 rng(11);
  std::normal_distribution<float> gauss;
  const int n = 16, warmup = 3;
  std::vector<float> params(n), plain(n);
  for (auto& x : params) x = gauss(rng);
  plain = params;
  std::vector<double> theta(params.begin(), params.end()), m(n, 0.0);
  NesterovOuter warmed(n, 0.7, 0.9, warmup), nesterov(n, 0.7, 0.9);
  for (int k = 1; k <= 5; ++k) {
    std::vector<float> delta(n);
    for (auto& x : delta) x = gauss(rng);
    warmed.step(params.data(), delta.data());
    nesterov.step(plain.data(), delta.data());
    const double mu = 0.9 * std::min(1.0, double(k) / warmup);
    for (int i = 0; i < n; ++i) {
      m[i] = mu * m[i] + delta[i];
      theta[i] -= 0.7 * (delta[i] + mu * m[i]);
    }
    for (int i = 0; i < n; ++i) CHECK(params[i] == doctest::Approx(theta[i]).epsilon(1e-5));
    if (k == 1) CHECK(params != plain);
  }
}

TEST_CASE("the streaming merge equals the batch merge to 1e-6 for every rule, in every arrival order, split or whole") {
  // 5 contributions of a fragment big enough for the multi-threaded passes (4 parts of 2^16).
  const int64_t n = int64_t{1} << 18;
  std::mt19937 rng(7);
  std::normal_distribution<float> gauss(0.0f, 0.02f);
  std::vector<std::vector<float>> deltas(5, std::vector<float>(static_cast<size_t>(n)));
  for (size_t m = 0; m < deltas.size(); ++m) {
    const float scale = 1.0f + static_cast<float>(m);  // unequal norms: rda's and the weights' cases differ
    for (auto& v : deltas[m]) v = scale * gauss(rng);
  }
  deltas[2].assign(static_cast<size_t>(n), 0.0f);  // a zero Δ: weight without direction (rda)
  const std::vector<int64_t> tokens{640, 1280, 320, 640, 960}, steps{10, 20, 5, 10, 10};
  for (MergeRule rule : {MergeRule::mean, MergeRule::token_weighted, MergeRule::rda}) {
    CAPTURE(static_cast<int>(rule));
    std::vector<Contribution> batch;
    for (size_t m = 0; m < deltas.size(); ++m) batch.push_back({deltas[m].data(), tokens[m], steps[m]});
    auto expected = merge(batch, n, rule);
    REQUIRE(expected.ok());
    std::vector<size_t> order{0, 1, 2, 3, 4};
    int orders = 0;
    double worst = 0;
    do {
      MergeAccumulator sum(n, rule, 4);
      for (size_t m : order) {
        sum.add(deltas[m].data(), merge_weight(tokens[m], steps[m], rule), l2_norm(deltas[m].data(), n, 4));
      }
      REQUIRE(sum.count() == 5);
      auto streamed = sum.result();
      REQUIRE(streamed.ok());
      for (int64_t i = 0; i < n; ++i) worst = std::max(worst, std::abs(double((*streamed)[i]) - (*expected)[i]));
      ++orders;
    } while (std::next_permutation(order.begin(), order.end()));
    CHECK(orders == 120);
    CHECK(worst <= 1e-6);
    CHECK(worst > 0);  // fp32 sums in arrival order: not the batch's fp64 bits, so the check compares something
  }
  MergeAccumulator none(n, MergeRule::mean);
  CHECK_FALSE(none.result().ok());
  MergeAccumulator zero_weight(n, MergeRule::token_weighted);
  zero_weight.add(deltas[0].data(), merge_weight(0, 10, MergeRule::token_weighted), 1.0);
  CHECK_FALSE(zero_weight.result().ok());
}

TEST_CASE("the norm and the fold give the same numbers on 1 thread and on many") {
  const int64_t n = (int64_t{1} << 18) + 17;  // ranges of unequal length
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) x[static_cast<size_t>(i)] = std::sin(0.001f * static_cast<float>(i));
  CHECK(l2_norm(x.data(), n, 1) == doctest::Approx(l2_norm(x.data(), n, 8)).epsilon(1e-12));
  MergeAccumulator one(n, MergeRule::mean, 1), many(n, MergeRule::mean, 8);
  one.add(x.data(), 1.0, 0);
  many.add(x.data(), 1.0, 0);
  one.add(x.data(), 2.0, 0);
  many.add(x.data(), 2.0, 0);
  CHECK(*one.result() == *many.result());
}

namespace {

// One round of M pseudo-gradients of H steps each, fed to the work clock in pieces: `groups` lists
// the contributions of each commit. A piece's g is Σ Δ / M (its share of the round).
void feed_round(OuterState& state, std::vector<float>& theta, const std::vector<std::vector<float>>& deltas,
                const std::vector<std::vector<int>>& groups, int64_t h, double lr, double mu) {
  const int64_t m = static_cast<int64_t>(deltas.size());
  const size_t n = theta.size();
  for (const auto& group : groups) {
    std::vector<float> g(n, 0.0f);
    for (int c : group) {
      for (size_t i = 0; i < n; ++i) g[i] += deltas[c][i] / static_cast<float>(m);
    }
    work_clock_step(state, theta.data(), g.data(), static_cast<int64_t>(group.size()) * h, m * h, lr, mu);
  }
}

}  // namespace

TEST_CASE("the work clock: a round in one commit is the Nesterov step bit for bit, any split of it ends at the same θ and m") {
  const int M = 4, n = 64;
  const int64_t H = 10;
  const double lr = 0.7, mu = 0.9;
  std::mt19937 rng(41);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<std::vector<std::vector<float>>> rounds(3, std::vector<std::vector<float>>(M, std::vector<float>(n)));
  for (auto& round : rounds)
    for (auto& d : round)
      for (auto& x : d) x = normal(rng);
  std::vector<float> theta0(n);
  for (auto& x : theta0) x = normal(rng);

  // Today's Nesterov step on each round's mean: the yardstick.
  OuterState nesterov = zero_outer_state(n, false);
  std::vector<float> theta_nesterov = theta0;
  // The work clock with each round whole.
  OuterState whole = zero_outer_state(n, true);
  std::vector<float> theta_whole = theta0;
  for (const auto& round : rounds) {
    std::vector<float> mean(n, 0.0f);
    for (const auto& d : round)
      for (int i = 0; i < n; ++i) mean[i] += d[i] / static_cast<float>(M);
    nesterov_step(nesterov, theta_nesterov.data(), mean.data(), lr, mu);
    feed_round(whole, theta_whole, round, {{0, 1, 2, 3}}, H, lr, mu);
  }
  CHECK(theta_whole == theta_nesterov);  // bit for bit
  CHECK(whole.momentum == nesterov.momentum);
  CHECK(whole.steps == 3);

  // The same rounds split into M commits, into pairs, and into random groupings (the learners that
  // finished between pieces change nothing: a piece's share is of the M a round expects).
  std::vector<std::vector<std::vector<int>>> splits = {{{0}, {1}, {2}, {3}}, {{0, 1}, {2, 3}}, {{2}, {0, 3}, {1}}};
  std::vector<int> order = {0, 1, 2, 3};
  for (int trial = 0; trial < 5; ++trial) {
    std::shuffle(order.begin(), order.end(), rng);
    const int cut = 1 + static_cast<int>(rng() % 3);
    splits.push_back({std::vector<int>(order.begin(), order.begin() + cut), std::vector<int>(order.begin() + cut, order.end())});
  }
  for (const auto& split : splits) {
    OuterState pieces = zero_outer_state(n, true);
    std::vector<float> theta = theta0;
    for (const auto& round : rounds) feed_round(pieces, theta, round, split, H, lr, mu);
    CHECK(pieces.steps == 3);
    CHECK(pieces.work_steps == 0);
    for (int i = 0; i < n; ++i) {  // to 1e-5 · (1 + |x|): the rounding of the pieces' sums, on values of O(1)
      CHECK(theta[i] == doctest::Approx(theta_nesterov[i]).epsilon(1e-5));
      CHECK(pieces.momentum[i] == doctest::Approx(nesterov.momentum[i]).epsilon(1e-5));
    }
  }
}

TEST_CASE("the work clock: work short of a round gets a plain step and no look-ahead, the momentum waits for the round") {
  const int n = 8;
  const double lr = 0.7, mu = 0.9;
  OuterState state = zero_outer_state(n, true);
  state.momentum.assign(n, 2.0f);  // momentum from earlier rounds
  std::vector<float> theta(n, 1.0f), g(n, 0.1f);
  // 13 steps of a round of 4 x 50: θ moves by lr·g exactly, m stays, nothing of μ·m is released.
  work_clock_step(state, theta.data(), g.data(), 13, 200, lr, mu);
  for (int i = 0; i < n; ++i) {
    CHECK(theta[i] == doctest::Approx(1.0f - 0.7f * 0.1f).epsilon(1e-7));
    CHECK(state.momentum[i] == 2.0f);
  }
  CHECK(state.work_steps == 13);
  CHECK(state.steps == 0);
  // The rest of the round arrives (187 steps): now the momentum folds in the round's whole g.
  std::vector<float> rest(n, 0.3f);
  work_clock_step(state, theta.data(), rest.data(), 187, 200, lr, mu);
  CHECK(state.work_steps == 0);
  CHECK(state.steps == 1);
  for (int i = 0; i < n; ++i) {
    CHECK(state.momentum[i] == doctest::Approx(0.9 * 2.0 + 0.4).epsilon(1e-6));
    CHECK(theta[i] == doctest::Approx(1.0 - 0.7 * 0.4 - 0.7 * 0.9 * (0.9 * 2.0 + 0.4)).epsilon(1e-6));
  }
}

TEST_CASE("the work clock: commits that straddle the ends of rounds move the momentum once per round of work") {
  // Rounds of 100 steps; a steady signal of 1 per round (g = steps / 100). Commits of 60, 60, 80 steps
  // hold two rounds of work, and the second commit straddles the first round's end: the momentum must
  // move twice, each time by one round's signal, as two whole rounds would move it.
  const double lr = 0.7, mu = 0.9;
  OuterState whole = zero_outer_state(1, false);
  float theta_whole = 0.0f;
  const float one = 1.0f;
  nesterov_step(whole, &theta_whole, &one, lr, mu);
  nesterov_step(whole, &theta_whole, &one, lr, mu);

  OuterState clock = zero_outer_state(1, true);
  float theta = 0.0f;
  for (int64_t steps : {60, 60, 80}) {
    const float g = static_cast<float>(steps) / 100.0f;
    work_clock_step(clock, &theta, &g, steps, 100, lr, mu);
  }
  CHECK(clock.steps == 2);
  CHECK(clock.work_steps == 0);
  CHECK(clock.momentum[0] == doctest::Approx(whole.momentum[0]).epsilon(1e-6));
  CHECK(theta == doctest::Approx(theta_whole).epsilon(1e-6));

  // 2.5 rounds in one commit: two momentum updates, half a round's signal waiting with its work.
  OuterState big = zero_outer_state(1, true);
  float theta_big = 0.0f;
  const float g = 2.5f;
  work_clock_step(big, &theta_big, &g, 250, 100, lr, mu);
  CHECK(big.steps == 2);
  CHECK(big.work_steps == 50);
  CHECK(big.accumulated[0] == doctest::Approx(0.5).epsilon(1e-6));
  CHECK(big.momentum[0] == doctest::Approx(whole.momentum[0]).epsilon(1e-6));
}
