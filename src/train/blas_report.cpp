#include "train/blas_report.hpp"

#include <functional>
#include <vector>

#include "core/blas.hpp"
#include "parallel/world.hpp"

namespace kgpt::train {

std::string blas_report() {
  const BlasInfo& info = blas_info();
  const std::uint64_t mine = std::hash<std::string>{}(info.library + "|" + info.kernel + "|" + info.chosen_by);
  const std::vector<std::uint64_t> all = parallel::gather_all(mine);
  std::string line = "blas: " + describe_blas(info);
  if (all.size() == 1) return line;
  std::string differ;
  for (std::size_t r = 0; r < all.size(); ++r) {
    if (all[r] != all.front()) differ += (differ.empty() ? "" : ", ") + std::to_string(r);
  }
  return line + (differ.empty() ? "; every rank the same"
                                : "; rank 0's (ranks " + differ + " run another BLAS, kernel or setting)");
}

}  // namespace kgpt::train
