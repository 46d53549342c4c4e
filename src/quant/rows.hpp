#pragma once
// The row quantizer: how `kgpt export` stores a matrix's rows in b bits (io/artifact.hpp) and how
// late QAT rounds them while training (features/late_qat/), as one formula that host code and device
// kernels both call, so the weights trained against are the weights stored. With R = 2^(b-1) - 1 and
// a row's scale s > 0:
//   q = clamp(round-half-even(w / s), -R, R),  and the row reads back as q s.
// Export picks s per row among clip candidates and rounds it to fp16; late QAT takes s = max|w| / R.

#include <Kokkos_Core.hpp>

#include <cmath>

namespace kgpt::quant {

// R: the largest code of a row quantized to `bits` (4-8).
KOKKOS_INLINE_FUNCTION int code_limit(int bits) { return (1 << (bits - 1)) - 1; }

// q for the value w at scale s > 0 with largest code `limit` (R as a float). rintf rounds half to
// even in the default rounding mode, as torch.round does.
KOKKOS_INLINE_FUNCTION float row_code(float w, float scale, float limit) {
  return fminf(fmaxf(rintf(w / scale), -limit), limit);
}

// Late QAT's scale of a row whose largest |w| is `top`: no clip, in float.
KOKKOS_INLINE_FUNCTION float max_scale(float top, float limit) { return top / limit; }

}  // namespace kgpt::quant
