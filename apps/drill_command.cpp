#include "apps/drill_command.hpp"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <vector>

#include "apps/config.hpp"
#include "apps/drill/gloo_baseline.hpp"
#include "apps/drill/invariants.hpp"
#include "apps/drill/observations.hpp"
#include "apps/drill/report.hpp"
#include "apps/drill/runner.hpp"
#include "apps/drill/schedule.hpp"
#include "apps/drill/site_network.hpp"

namespace archipelago::apps {

int run_drill(const DrillArguments& arguments) {
  using namespace drill;
  namespace fs = std::filesystem;
  auto fail = [](int code, const std::string& message) {
    std::fprintf(stderr, "archipelago drill: %s\n", message.c_str());
    return code;
  };
  auto loaded = load_drill(arguments.config_file);
  if (!loaded) return fail(2, loaded.error().reason);
  const DrillConfig c = *loaded;
  if (arguments.duration_s && *arguments.duration_s < 1) return fail(2, "--duration must be at least 1 s");
  if (arguments.kills && *arguments.kills < 1) return fail(2, "--kills must be at least 1");
  const bool soak = arguments.kills.has_value();
  const double duration_s = arguments.duration_s.value_or(soak ? 1e9 : c.duration_s);
  const std::vector<Fault> schedule = make_schedule(c, arguments.seed, soak && !arguments.duration_s ? 86400.0 * 7 : duration_s);
  if (soak && schedule.empty()) return fail(2, "--kills needs faults: give the drill [mtbf_s] rates");
  const fs::path report = arguments.report_dir.empty()
                              ? fs::path("archipelago-runs") / ("drill-" + c.name + "-" + std::to_string(arguments.seed))
                              : fs::path(arguments.report_dir);
  std::error_code ec;
  fs::create_directories(report, ec);
  if (ec) return fail(1, "cannot create " + report.string() + ": " + ec.message());

  // Children exec /proc/self/exe, the very file this process runs, even if a rebuild replaced the path.
  const std::string binary = "/proc/self/exe";
  // The run's configuration as the coordinator will load it (its errors now, not in a child).
  auto effective = load_config(std::nullopt, "drill.sets", c.sets);
  if (!effective) return fail(2, "drill.sets: " + effective.error().reason);
  std::unique_ptr<SiteNetwork> net;
  if (c.netns) {
    auto made = SiteNetwork::create(c.sites);
    if (!made) return fail(1, "this drill runs its sites in network namespaces (netns = true): " + made.error().reason);
    net = std::move(*made);
    if (auto st = net->enter_hub(); !st) return fail(1, st.error().reason);
  }

  DrillOutcome outcome{c, arguments, *effective, net ? std::optional<std::string>(net->prefix()) : std::nullopt,
                       soak, duration_s, {}, {}, report};
  if (!soak && c.reference) outcome.variants.push_back(DrillVariant::fault_free);
  outcome.variants.push_back(DrillVariant::diloco);
  if (!soak && c.baseline) outcome.variants.push_back(DrillVariant::ddp);
  if (!soak && c.baseline && c.gloo_baseline && !c.netns) outcome.variants.push_back(DrillVariant::gloo);
  auto& runs = outcome.runs;
  for (const auto variant : outcome.variants) {
    const char* name = drill_variant_name(variant);
    const bool faulted = variant != DrillVariant::fault_free;
    std::fprintf(stderr, "archipelago drill %s seed %llu: %s run (%zu faults scheduled over %.0f s)\n", c.name.c_str(),
                 static_cast<unsigned long long>(arguments.seed), name, faulted ? schedule.size() : size_t{0}, duration_s);
    RunResult r;
    if (variant == DrillVariant::gloo) {
      r = run_gloo_baseline(c, schedule, report / name, binary, duration_s);
    } else {
      Runner runner(c, variant, faulted ? schedule : std::vector<Fault>{}, report / name, binary, duration_s,
                    variant == DrillVariant::diloco ? arguments.kills : std::nullopt, arguments.seed, net.get());
      runner.run();
      const double theta0 = runs.count(DrillVariant::fault_free) ? runs[DrillVariant::fault_free].initial_loss : NAN;
      runner.check_loss(theta0);
      r = runner.take();
    }
    if (!r.driven) return fail(1, std::string(name) + " run: " + r.error);
    std::fprintf(stderr, "  %s: goodput %.3f, held-out loss %.4f -> %.4f, %d kills, %zu recoveries, %zu skipped\n", name,
                 r.goodput, r.initial_loss, r.final_loss, r.kills, r.recoveries.size(), r.skipped.size());
    runs[variant] = std::move(r);
  }

  RunResult& diloco = runs[DrillVariant::diloco];
  if (runs.count(DrillVariant::fault_free)) {
    diloco.checks.push_back(loss_within_margin_of_fault_free(diloco.final_loss, runs[DrillVariant::fault_free].final_loss,
                                                             c.loss_margin));
  }
  // A fault that was scheduled and not carried out leaves the drill with less evidence than it claims.
  diloco.checks.push_back(no_scheduled_fault_skipped(runs, c.allow_skipped));
  const nlohmann::json result = result_of(outcome);
  write_report(outcome, result);

  const int passed = result["invariants_passed"].get<int>(), total = result["invariants_total"].get<int>();
  if (arguments.json) {
    std::printf("%s\n", result.dump().c_str());
  } else {
    std::printf("drill %s seed %llu: %d of %d invariants held, %d kills; report %s\n", c.name.c_str(),
                static_cast<unsigned long long>(arguments.seed), passed, total, diloco.kills,
                (report / "report.md").string().c_str());
    for (const auto& check : diloco.checks) {
      std::printf("  %s %s: %s\n", check.passed ? "pass" : "FAIL", check.name.c_str(), check.evidence.c_str());
    }
  }
  std::fflush(stdout);
  return passed == total ? 0 : 1;
}

}  // namespace archipelago::apps
