#include "diloco/mode.hpp"

namespace archipelago::diloco {

const std::vector<Mode>& all_modes() {
  static const std::vector<Mode> modes{Mode::sync, Mode::decoupled, Mode::async, Mode::ddp};
  return modes;
}

const char* mode_name(Mode mode) {
  switch (mode) {
    case Mode::sync: return "sync";
    case Mode::decoupled: return "decoupled";
    case Mode::async: return "async";
    case Mode::ddp: return "ddp";
  }
  return "?";
}

namespace {
std::string names_of(const std::vector<Mode>& modes) {
  std::string out;
  for (Mode m : modes) out += std::string(out.empty() ? "" : ", ") + mode_name(m);
  return out;
}
}  // namespace

Expected<Mode> parse_mode(std::string_view name) {
  for (Mode m : all_modes()) {
    if (name == mode_name(m)) return m;
  }
  return make_error(ErrorCode::invalid_argument,
                    "unknown mode '" + std::string(name) + "' (one of " + names_of(all_modes()) + ")");
}

const char* engine_name(Engine engine) { return engine == Engine::actors ? "actors" : "reference"; }

Expected<Engine> parse_engine(std::string_view name) {
  if (name == "actors") return Engine::actors;
  if (name == "reference") return Engine::reference;
  return make_error(ErrorCode::invalid_argument, "unknown engine '" + std::string(name) + "' (one of actors, reference)");
}

bool engine_runs(Engine engine, Mode mode) {
  return engine == Engine::actors || mode == Mode::sync || mode == Mode::ddp;
}

Status check_engine_mode(Engine engine, Mode mode) {
  if (engine_runs(engine, mode)) return Status::success();
  std::vector<Mode> runs;
  for (Mode m : all_modes()) {
    if (engine_runs(engine, m)) runs.push_back(m);
  }
  return make_error(ErrorCode::invalid_argument, std::string("the ") + engine_name(engine) + " engine runs " +
                                                     names_of(runs) + ", not " + mode_name(mode));
}

bool staggered(Mode mode) { return mode == Mode::decoupled || mode == Mode::async; }
bool dynamic_local_steps(Mode mode) { return mode == Mode::async; }
bool whole_rounds(Mode mode) { return mode == Mode::sync || mode == Mode::ddp; }
bool round_barrier(Mode mode) { return mode == Mode::sync; }
bool numbered_rounds(Mode mode) { return mode == Mode::decoupled; }
bool merge_on_arrival(Mode mode) { return mode == Mode::async || mode == Mode::ddp; }
bool data_parallel(Mode mode) { return mode == Mode::ddp; }
bool shardable(Mode mode) { return mode == Mode::decoupled || mode == Mode::async; }
bool runs_across_processes(Mode mode) { return mode != Mode::ddp; }

Status check_across_processes(Mode mode) {
  if (runs_across_processes(mode)) return Status::success();
  std::vector<Mode> runs;
  for (Mode m : all_modes()) {
    if (runs_across_processes(m)) runs.push_back(m);
  }
  return make_error(ErrorCode::invalid_argument, std::string("'") + mode_name(mode) +
                                                     "' is not supported across processes (" + names_of(runs) + ")");
}

const char* outer_rule_name(OuterRule rule) {
  switch (rule) {
    case OuterRule::nesterov: return "nesterov";
    case OuterRule::work_clock: return "work_clock";
    case OuterRule::per_commit_nesterov: return "per_commit_nesterov";
    case OuterRule::delayed_nesterov: return "delayed_nesterov";
    case OuterRule::memoryless: return "memoryless";
    case OuterRule::average: return "average";
  }
  return "?";
}

Expected<OuterRule> outer_rule(Mode mode, std::string_view optimizer) {
  auto refuse = [&](const std::string& takes) -> Expected<OuterRule> {
    return make_error(ErrorCode::invalid_argument, "outer.optimizer = '" + std::string(optimizer) + "' in " +
                                                       mode_name(mode) + " mode: " + takes);
  };
  if (mode == Mode::ddp) {
    if (optimizer == "auto") return OuterRule::average;
    return refuse("ddp has no outer optimizer (only auto)");
  }
  if (mode == Mode::sync) {
    if (optimizer == "auto" || optimizer == "nesterov") return OuterRule::nesterov;
    if (optimizer == "memoryless") return OuterRule::memoryless;
    return refuse("a sync round is merged whole (auto, nesterov or memoryless)");
  }
  if (optimizer == "auto" || optimizer == "nesterov") return OuterRule::work_clock;
  if (optimizer == "per_commit_nesterov") return OuterRule::per_commit_nesterov;
  if (optimizer == "delayed_nesterov") return OuterRule::delayed_nesterov;
  if (optimizer == "memoryless") return OuterRule::memoryless;
  return refuse("one of auto, nesterov, per_commit_nesterov, delayed_nesterov, memoryless");
}

}  // namespace archipelago::diloco
