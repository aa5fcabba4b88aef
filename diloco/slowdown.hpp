// How many times its compute an inner step of a learner takes: the straggler's factor of fault
// injection (faults.slow_learners), varied per step by a step-time jitter, times an operator's
// throttle (the console's `throttle`). A learner sleeps for (factor − 1) × its step's compute time.
//
// The jitter is the relative standard deviation of a normal around the straggler's factor (the
// Decoupled DiLoCo paper's mixed hardware: 18 % slower with a 10 % step-time variance). A sleep can
// only add time, so the result is never below 1: at 1.18 ± 10 %, 6.4 % of the steps draw below 1 and
// take 1. Pure: the caller owns the generator (seeded per learner, so a run's draws repeat).
#pragma once

#include <random>

namespace archipelago::diloco {

double step_slowdown(double straggler_factor, double jitter, double throttle, std::mt19937_64& generator);

}  // namespace archipelago::diloco
