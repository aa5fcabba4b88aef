#include "diloco/time_sheet.hpp"

namespace archipelago::diloco {

void TimeSheet::switch_to(Activity next, double now) {
  sums_[static_cast<int>(current_)] += now - since_;
  current_ = next;
  since_ = now;
}

double TimeSheet::seconds(Activity activity, double now) const {
  const double open = activity == current_ ? now - since_ : 0;
  return sums_[static_cast<int>(activity)] + open;
}

}  // namespace archipelago::diloco
