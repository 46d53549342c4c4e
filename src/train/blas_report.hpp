#pragma once
// The log line naming the host BLAS and its kernel (core/blas.hpp), checked across the ranks: a
// rank whose BLAS runs another kernel (another CPU, another setting) is named.

#include <string>

namespace kgpt::train {

// "blas: OpenBLAS 0.3.21 (...), kernel SkylakeX, ...; every rank the same". Collective.
std::string blas_report();

}  // namespace kgpt::train
