// Start-up check that LibTorch runs on an optimized BLAS. Debian's libtorch-dev links the generic
// libblas.so.3; when that alternative resolves to the reference implementation, fp32 training is
// ~30x slower. Call once at start-up, after nothing else is computing.
#pragma once

#include <string>

namespace archipelago::training {

struct BlasReport {
  std::string library;     // the libblas/openblas file mapped into this process, or "" if none
  double gflops = 0;       // measured on a 512×512 fp32 matmul
  bool optimized = false;  // OpenBLAS/MKL mapped and fast enough
  std::string message;     // one line for the log
};

BlasReport check_blas();

}  // namespace archipelago::training
