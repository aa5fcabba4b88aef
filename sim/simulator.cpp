// The event loop of simulator.hpp: between two events every group's state is constant, so work,
// failure clocks and chip-seconds advance linearly; an event is an interruption, the end of a
// recovery, checkpoint pause, stall or coordinator outage, a drill kill or scheduled fault, or the
// end of the run.
#include "sim/simulator.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <random>
#include <utility>
#include <vector>

namespace archipelago::sim {
namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();

enum class Phase { computing, recovering, checkpointing, stalled };

// Why a group is recovering: the part of SimResult its down time is counted in.
enum class Cause { learner, node };

enum class FaultKind { learner, node, coordinator, stall };

struct ScheduledFault {
  double at_s;
  FaultKind kind;
};

struct Group {
  double chips = 0;
  Phase phase = Phase::computing;
  Cause cause = Cause::learner;        // while recovering
  double phase_ends = kInfinity;       // wall time a recovery or checkpoint pause ends
  double failure_clock = kInfinity;    // computing seconds until the next interruption
  double since_checkpoint = 0;         // ddp: nominal compute seconds since the last checkpoint
  double step_progress = 0;            // nominal seconds into the current step
  long long step_count = 0;            // steps completed (the fragment schedule's clock)
  long long steps_since_restart = 0;   // decoupled: steps since the learner last rejoined
  double pending = 0;                  // decoupled: nominal seconds sent while the syncer had no quorum
};

std::uint64_t splitmix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

int group_count(const SimConfig& c, Strategy strategy) { return strategy == Strategy::decoupled ? c.learners : 1; }

struct RunTotals {
  double wall = 0, kept = 0, lost = 0, recovery = 0, straggler = 0, interruptions = 0;
  double learner_down = 0, node_down = 0, coordinator_down = 0, stalled = 0, overhead = 0;
  double up = 0;           // wall seconds in which the job progressed (see SimResult::uptime)
  bool truncated = false;  // stopped after kMaxEventsPerRun events, before the job was done
};

// A job that can barely progress (say checkpoints far apart against a short MTBF) would take
// astronomically many events; its goodput is then measured over the first this many.
constexpr long long kMaxEventsPerRun = 2'000'000;

class Run {
 public:
  // slowdown: a group's step time over the nominal one (straggling).
  Run(const SimConfig& c, Strategy strategy, double slowdown, std::uint64_t seed)
      : c_(c), strategy_(strategy), rng_(seed), slowdown_(slowdown) {
    const int groups = group_count(c, strategy);
    groups_.resize(groups);
    const double chips_per_group = c.chips / groups;
    const double mtbf_s = c.learner_mtbf_s > 0 ? c.learner_mtbf_s : c.mtbi_hours * 3600.0 / chips_per_group;
    failure_rate_ = 1.0 / mtbf_s;
    for (Group& g : groups_) {
      g.chips = chips_per_group;
      g.failure_clock = sample_failure();
    }
    up_ = groups;
    target_ = c.wall_s > 0 ? kInfinity : c.chips * job_work_s(c);
    next_kill_ = c.kill_every_s > 0 ? c.kill_every_s : kInfinity;
    schedule_faults();
  }

  RunTotals run() {
    const double end = c_.wall_s > 0 ? c_.wall_s : kInfinity;
    while (true) {
      // The next event, and how fast the kept work grows until then.
      double rate = 0, next = std::min({end, next_kill_, coordinator_up_at_});
      if (next_fault_ < schedule_.size()) next = std::min(next, schedule_[next_fault_].at_s);
      for (const Group& g : groups_) {
        if (g.phase == Phase::computing) {
          if (!coordinator_down()) rate += g.chips * c_.fault_free_efficiency / slowdown_;
          next = std::min(next, now_ + g.failure_clock);
          if (strategy_ == Strategy::ddp && c_.checkpoint_save_s > 0)  // free checkpoints need no event
            next = std::min(next, now_ + (c_.checkpoint_interval_s - g.since_checkpoint) * slowdown_);
        } else {
          next = std::min(next, g.phase_ends);
        }
      }
      const bool finishes = rate > 0 && now_ + (target_ - totals_.kept) / rate <= next;
      if (finishes) next = now_ + (target_ - totals_.kept) / rate;
      if (next == kInfinity) break;  // nothing computes and nothing will change
      advance(next - now_);
      if (finishes || now_ >= end) break;
      if (++events_ > kMaxEventsPerRun) {
        totals_.truncated = true;
        break;
      }
      handle_events();
    }
    totals_.wall = now_;
    return totals_;
  }

 private:
  bool coordinator_down() const { return coordinator_up_at_ < kInfinity; }

  // The drill's faults of each kind at uniform times, ending inside the window; victims are drawn
  // when they strike.
  void schedule_faults() {
    const std::pair<int, std::pair<FaultKind, double>> kinds[] = {
        {c_.learner_faults, {FaultKind::learner, recovery_s(FaultKind::learner)}},
        {c_.node_faults, {FaultKind::node, recovery_s(FaultKind::node)}},
        {c_.coordinator_faults, {FaultKind::coordinator, c_.coordinator_restart_s}},
        {c_.node_stalls, {FaultKind::stall, c_.node_stall_s}}};
    for (const auto& [count, kind] : kinds) {
      std::uniform_real_distribution<double> at(0, std::max(0.0, c_.wall_s - kind.second));
      for (int i = 0; i < count; ++i) schedule_.push_back({at(rng_), kind.first});
    }
    std::stable_sort(schedule_.begin(), schedule_.end(),
                     [](const ScheduledFault& a, const ScheduledFault& b) { return a.at_s < b.at_s; });
  }

  // How long a learner or node fault keeps its victims down.
  double recovery_s(FaultKind kind) const {
    if (strategy_ == Strategy::ddp) return c_.restart_s;
    if (strategy_ == Strategy::elastic_ddp) return c_.rescale_s;
    return kind == FaultKind::node ? c_.node_restart_s : c_.learner_restart_s;
  }

  double sample_failure() {
    if (c_.learner_mtbf_s <= 0 && !(c_.mtbi_hours < kInfinity)) return kInfinity;
    return std::exponential_distribution<double>(failure_rate_)(rng_);
  }

  void advance(double dt) {
    int computing = 0;
    for (const Group& g : groups_) computing += g.phase == Phase::computing ? 1 : 0;
    if (computing >= c_.quorum && !coordinator_down()) totals_.up += dt;
    for (Group& g : groups_) {
      if (g.phase != Phase::computing || coordinator_down()) {
        const double down = g.chips * dt;
        totals_.recovery += down;
        if (g.phase == Phase::recovering) (g.cause == Cause::node ? totals_.node_down : totals_.learner_down) += down;
        else if (g.phase == Phase::stalled) totals_.stalled += down;
        else if (g.phase == Phase::computing) totals_.coordinator_down += down;
        if (g.phase == Phase::computing) g.failure_clock -= dt;  // it still runs, and can still fail
        continue;
      }
      const double computed = dt / slowdown_;
      const double nominal = computed * c_.fault_free_efficiency;
      totals_.kept += g.chips * nominal;
      totals_.straggler += g.chips * (dt - computed);
      totals_.overhead += g.chips * (computed - nominal);
      g.failure_clock -= dt;
      g.since_checkpoint += nominal;
      if (up_ < c_.quorum) g.pending += nominal;
      g.step_progress += nominal;
      const long long steps = static_cast<long long>(std::floor(g.step_progress / c_.step_time_s + 1e-9));
      if (steps > 0) {
        g.step_progress = std::max(0.0, g.step_progress - steps * c_.step_time_s);
        g.step_count += steps;
        g.steps_since_restart += steps;
      }
    }
    now_ += dt;
  }

  // Nominal compute seconds a group loses when it is interrupted now.
  double lost_work(const Group& g) const {
    switch (strategy_) {
      case Strategy::ddp: {  // without pauses, checkpoints are not events: the last one was at a multiple
        if (c_.checkpoint_save_s > 0) return g.since_checkpoint;
        const double since = std::fmod(g.since_checkpoint, c_.checkpoint_interval_s);
        return c_.checkpoint_interval_s - since < 1e-9 * std::max(1.0, g.since_checkpoint) ? 0 : since;
      }
      case Strategy::elastic_ddp:
        return g.step_progress;
      case Strategy::decoupled: {
        long long at_most = g.steps_since_restart;
        if (c_.learner_checkpoint_steps > 0) at_most = std::min(at_most, g.steps_since_restart % c_.learner_checkpoint_steps);
        double unsent_steps = 0;
        for (int p = 0; p < c_.fragments; ++p) {
          const long long offset = static_cast<long long>(p) * c_.inner_steps / c_.fragments;
          const long long since_sync = ((g.step_count - offset) % c_.inner_steps + c_.inner_steps) % c_.inner_steps;
          unsent_steps += static_cast<double>(std::min(since_sync, at_most));
        }
        const double unsent = unsent_steps / c_.fragments * c_.step_time_s + g.step_progress;
        return std::max(unsent, g.pending);
      }
    }
    return 0;
  }

  // `g` fails now (it is computing or stalled) and is down for recovery_s(kind).
  void interrupt(Group& g, FaultKind kind = FaultKind::learner) {
    const double lost = lost_work(g);
    totals_.lost += g.chips * lost;
    totals_.kept -= g.chips * lost;
    totals_.interruptions += 1;
    g.phase = Phase::recovering;
    g.cause = kind == FaultKind::node ? Cause::node : Cause::learner;
    g.phase_ends = now_ + recovery_s(kind);
    g.since_checkpoint = 0;
    g.step_progress = 0;
    g.steps_since_restart = 0;
    g.pending = 0;
    g.failure_clock = sample_failure();
    --up_;
  }

  void resume(Group& g) {
    g.phase = Phase::computing;
    g.phase_ends = kInfinity;
    if (++up_ >= c_.quorum)
      for (Group& other : groups_) other.pending = 0;  // the syncer commits what was sent
  }

  // The groups of node `node`, and whether one of them is up.
  std::pair<size_t, size_t> node_groups(size_t node) const {
    const size_t per = static_cast<size_t>(std::min<int>(c_.learners_per_node, static_cast<int>(groups_.size())));
    return {node * per, std::min(groups_.size(), (node + 1) * per)};
  }

  // A random up victim (a group for learner faults, a node otherwise), or nothing: the fault is not applied.
  std::optional<size_t> victim(bool node) {
    const auto [first, last] = node_groups(0);
    const size_t per = last - first, count = node ? (groups_.size() + per - 1) / per : groups_.size();
    std::vector<size_t> up;
    for (size_t i = 0; i < count; ++i) {
      const auto [from, to] = node ? node_groups(i) : std::pair{i, i + 1};
      bool any = false;
      for (size_t k = from; k < to; ++k) any = any || groups_[k].phase != Phase::recovering;
      if (any) up.push_back(i);
    }
    if (up.empty()) return std::nullopt;
    return up[std::uniform_int_distribution<size_t>(0, up.size() - 1)(rng_)];
  }

  void apply(FaultKind kind) {
    if (kind == FaultKind::coordinator) {  // a drill counts only kills of a running coordinator: one
      if (coordinator_down()) ++deferred_outages_;  // due while it is down comes when it is back
      else coordinator_up_at_ = now_ + c_.coordinator_restart_s;
      return;
    }
    const std::optional<size_t> chosen = victim(kind != FaultKind::learner);
    if (!chosen) return;
    const auto [from, to] = kind == FaultKind::learner ? std::pair{*chosen, *chosen + 1} : node_groups(*chosen);
    for (size_t k = from; k < to; ++k) {
      Group& g = groups_[k];
      if (kind == FaultKind::stall) {
        if (g.phase == Phase::recovering) continue;
        g.phase_ends = std::max(g.phase == Phase::stalled ? g.phase_ends : 0.0, now_ + c_.node_stall_s);
        g.phase = Phase::stalled;
      } else if (g.phase == Phase::recovering) {  // a learner already restarting dies with its node
        g.phase_ends = std::max(g.phase_ends, now_ + recovery_s(kind));
        g.cause = Cause::node;
      } else {
        interrupt(g, kind);
      }
    }
  }

  void handle_events() {
    constexpr double kEps = 1e-9;
    if (now_ >= coordinator_up_at_ - kEps) {
      coordinator_up_at_ = kInfinity;
      if (deferred_outages_ > 0) {
        --deferred_outages_;
        apply(FaultKind::coordinator);
      }
    }
    for (Group& g : groups_) {
      if (g.phase == Phase::computing) {
        if (g.failure_clock <= kEps) {
          interrupt(g);
        } else if (strategy_ == Strategy::ddp && c_.checkpoint_save_s > 0 &&
                   g.since_checkpoint >= c_.checkpoint_interval_s - kEps) {
          g.since_checkpoint = 0;
          g.phase = Phase::checkpointing;
          g.phase_ends = now_ + c_.checkpoint_save_s;
        }
      } else if (now_ >= g.phase_ends - kEps) {
        if (g.phase == Phase::recovering) {
          resume(g);
        } else {  // a checkpoint pause or a stall ends
          g.phase = Phase::computing;
          g.phase_ends = kInfinity;
        }
      }
    }
    // A kill at the instant a checkpoint or step completes comes after it.
    if (now_ >= next_kill_ - kEps) {
      next_kill_ += c_.kill_every_s;
      std::vector<Group*> candidates;
      for (Group& g : groups_)
        if (g.phase == Phase::computing) candidates.push_back(&g);
      if (!candidates.empty())
        interrupt(*candidates[std::uniform_int_distribution<size_t>(0, candidates.size() - 1)(rng_)]);
    }
    for (; next_fault_ < schedule_.size() && now_ >= schedule_[next_fault_].at_s - kEps; ++next_fault_)
      apply(schedule_[next_fault_].kind);
  }

  const SimConfig& c_;
  Strategy strategy_;
  std::mt19937_64 rng_;
  double slowdown_ = 1;
  std::vector<Group> groups_;
  double failure_rate_ = 0, target_ = 0, next_kill_ = kInfinity, now_ = 0;
  double coordinator_up_at_ = kInfinity;  // < infinity: the coordinator is down until then
  std::vector<ScheduledFault> schedule_;
  size_t next_fault_ = 0;
  int deferred_outages_ = 0;              // coordinator faults due while it was down
  int up_ = 0;
  long long events_ = 0;
  RunTotals totals_;
};

}  // namespace

const char* strategy_name(Strategy strategy) {
  switch (strategy) {
    case Strategy::ddp: return "ddp";
    case Strategy::elastic_ddp: return "elastic_ddp";
    case Strategy::decoupled: return "decoupled";
  }
  return "?";
}

std::string validate(const SimConfig& c) {
  auto positive = [](double v) { return v > 0 && std::isfinite(v); };
  auto non_negative = [](double v) { return v >= 0 && std::isfinite(v); };
  if (!positive(c.chips) || c.chips < 1) return "chips must be >= 1";
  if (!(c.mtbi_hours > 0)) return "mtbi_hours must be > 0 (inf: no interruptions)";
  if (!non_negative(c.learner_mtbf_s)) return "learner_mtbf_s must be >= 0";
  if (!non_negative(c.kill_every_s)) return "kill_every_s must be >= 0";
  if (!non_negative(c.restart_s) || !non_negative(c.rescale_s) || !non_negative(c.learner_restart_s))
    return "restart_s, rescale_s and learner_restart_s must be >= 0";
  if (!positive(c.checkpoint_interval_s)) return "checkpoint_interval_s must be > 0";
  if (!non_negative(c.checkpoint_save_s)) return "checkpoint_save_s must be >= 0";
  if (c.learners < 1) return "learners must be >= 1";
  if (c.learners > c.chips) return "learners must be <= chips";
  if (!positive(c.step_time_s)) return "step_time_s must be > 0";
  if (c.inner_steps < 1) return "inner_steps must be >= 1";
  if (c.fragments < 1 || c.fragments > 100000) return "fragments must be in [1, 100000]";
  if (c.quorum < 1 || c.quorum > c.learners) return "quorum must be in [1, learners]";
  if (!non_negative(c.grace_s)) return "grace_s must be >= 0";
  if (c.learner_checkpoint_steps < 0) return "learner_checkpoint_steps must be >= 0";
  if (!non_negative(c.straggler_cv)) return "straggler_cv must be >= 0";
  if (!(c.fault_free_efficiency > 0 && c.fault_free_efficiency <= 1)) return "fault_free_efficiency must be in (0, 1]";
  if (c.learners_per_node < 1 || c.learners_per_node > c.learners) return "learners_per_node must be in [1, learners]";
  if (c.learner_faults < 0 || c.node_faults < 0 || c.coordinator_faults < 0 || c.node_stalls < 0)
    return "learner_faults, node_faults, coordinator_faults and node_stalls must be >= 0";
  if (!non_negative(c.node_restart_s) || !non_negative(c.coordinator_restart_s) || !non_negative(c.node_stall_s))
    return "node_restart_s, coordinator_restart_s and node_stall_s must be >= 0";
  if (c.learner_faults + c.node_faults + c.coordinator_faults + c.node_stalls > 0 && !(c.wall_s > 0))
    return "learner_faults, node_faults, coordinator_faults and node_stalls are counts in the wall window: set wall_s";
  if (!non_negative(c.wall_s) || !non_negative(c.work_s)) return "wall_s and work_s must be >= 0";
  if (c.wall_s == 0 && c.work_s == 0 &&
      !(positive(c.parameters) && positive(c.tokens) && positive(c.chip_flops) && positive(c.mfu) && c.mfu <= 1))
    return "parameters, tokens, chip_flops must be > 0 and mfu in (0, 1] (or set wall_s or work_s)";
  if (c.runs < 0 || c.runs > 1000000) return "runs must be in [0, 1000000]";
  if (c.wall_s == 0 && c.learner_mtbf_s == 0 && c.kill_every_s == 0 && c.mtbi_hours * 3600 < 1e-3)
    return "mtbi_hours is too small to simulate";
  return "";
}

double job_work_s(const SimConfig& c) {
  if (c.work_s > 0) return c.work_s;
  return 6.0 * c.parameters * c.tokens / (c.chips * c.chip_flops * c.mfu);
}

double expected_max_normal(double n) {
  if (n <= 1) return 0;
  // E[max] = integral of x n phi(x) Phi(x)^(n-1) dx, on a grid fine enough for n up to ~1e9.
  const double lo = -10, hi = 10, dx = 1e-3;
  double sum = 0;
  for (double x = lo; x <= hi; x += dx) {
    const double phi = std::exp(-0.5 * x * x) / std::sqrt(2 * M_PI);
    const double cdf = 0.5 * std::erfc(-x / std::sqrt(2.0));
    if (cdf <= 0) continue;
    sum += x * n * phi * std::exp((n - 1) * std::log(cdf)) * dx;
  }
  return sum;
}

SimResult simulate(const SimConfig& config, Strategy strategy) {
  SimResult result;
  double sum = 0, sum_sq = 0, wall = 0, interruptions = 0, lost = 0, recovery = 0, straggler = 0, up = 0;
  double learner_down = 0, node_down = 0, coordinator_down = 0, stalled = 0, overhead = 0;
  int runs = 0;
  const bool fixed = config.runs > 0;
  const double slowdown =
      config.straggler_cv > 0 ? 1 + config.straggler_cv * expected_max_normal(config.chips / group_count(config, strategy)) : 1;
  while (fixed ? runs < config.runs : (runs < 16 || (interruptions < 20000 && runs < 4096))) {
    Run run(config, strategy, slowdown, splitmix(config.seed * 1000003ULL + static_cast<std::uint64_t>(runs)));
    const RunTotals t = run.run();
    const double allocated = config.chips * t.wall;
    const double goodput = allocated > 0 ? t.kept / allocated : 0;
    sum += goodput;
    sum_sq += goodput * goodput;
    wall += t.wall;
    interruptions += t.interruptions;
    result.truncated_runs += t.truncated ? 1 : 0;
    if (allocated > 0) {
      lost += t.lost / allocated;
      recovery += t.recovery / allocated;
      straggler += t.straggler / allocated;
      learner_down += t.learner_down / allocated;
      node_down += t.node_down / allocated;
      coordinator_down += t.coordinator_down / allocated;
      stalled += t.stalled / allocated;
      overhead += t.overhead / allocated;
      up += t.up / t.wall;
    }
    ++runs;
  }
  result.runs = runs;
  result.goodput = sum / runs;
  const double variance = runs > 1 ? std::max(0.0, (sum_sq - sum * sum / runs) / (runs - 1)) : 0;
  result.goodput_stderr = std::sqrt(variance / runs);
  result.wall_s = wall / runs;
  result.interruptions = interruptions / runs;
  result.lost_work_share = lost / runs;
  result.recovery_share = recovery / runs;
  result.straggler_share = straggler / runs;
  result.learner_down_share = learner_down / runs;
  result.node_down_share = node_down / runs;
  result.coordinator_down_share = coordinator_down / runs;
  result.stall_share = stalled / runs;
  result.overhead_share = overhead / runs;
  result.uptime = up / runs;
  return result;
}

}  // namespace archipelago::sim
