#include "training/blas_check.hpp"

#include <chrono>
#include <fstream>

#include <torch/torch.h>

namespace archipelago::training {
namespace {

// Reference BLAS manages ~1-2 GFLOP/s here; OpenBLAS on one core manages tens.
constexpr double kSlowGflops = 5.0;

std::string mapped_blas_library() {
  std::ifstream maps("/proc/self/maps");
  std::string line, found;
  while (std::getline(maps, line)) {
    auto slash = line.find('/');
    if (slash == std::string::npos) continue;
    std::string path = line.substr(slash);
    if (path.find("openblas") != std::string::npos || path.find("libmkl") != std::string::npos) return path;
    if (path.find("libblas") != std::string::npos) found = path;
  }
  return found;
}

}  // namespace

BlasReport check_blas() {
  BlasReport report;
  auto a = torch::randn({512, 512});
  auto b = torch::randn({512, 512});
  torch::matmul(a, b);  // warm-up: loads the library, spins up its threads
  const int repeats = 4;
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < repeats; ++i) torch::matmul(a, b);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  report.gflops = repeats * 2.0 * 512 * 512 * 512 / seconds / 1e9;
  report.library = mapped_blas_library();
  const bool known_fast = report.library.find("openblas") != std::string::npos ||
                          report.library.find("mkl") != std::string::npos;
  report.optimized = known_fast && report.gflops >= kSlowGflops;
  char line[512];
  std::snprintf(line, sizeof line, "BLAS %s, 512x512 fp32 matmul at %.1f GFLOP/s%s",
                report.library.empty() ? "(none mapped: statically linked or MKL)" : report.library.c_str(),
                report.gflops,
                report.optimized ? "" : " -- SLOW: install libopenblas0-pthread (./scripts/setup.sh does)");
  report.message = line;
  if (report.library.empty() && report.gflops >= kSlowGflops) report.optimized = true;  // e.g. official LibTorch with MKL
  return report;
}

}  // namespace archipelago::training
