#include "apps/drill/observations.hpp"

#include <cstdio>

namespace archipelago::apps::drill {

const char* drill_variant_name(DrillVariant variant) {
  switch (variant) {
    case DrillVariant::ddp: return "ddp";
    case DrillVariant::diloco: return "diloco";
    case DrillVariant::fault_free: return "fault_free";
    case DrillVariant::gloo: return "ddp_gloo";
  }
  return "unknown";
}

std::string fixed(double v, int digits) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.*f", digits, v);
  return buffer;
}

}  // namespace archipelago::apps::drill
