#pragma once
// GELU in its tanh form (PyTorch's F.gelu(x, approximate='tanh'), GPT-2's "gelu_new") and its
// derivative, from their definitions in long double: what the ops' GELU is checked against.

#include <cmath>

namespace kgpt::test {

inline long double gelu_tanh(long double x) {
  const long double u = std::sqrt(2 / 3.14159265358979323846L) * (x + 0.044715L * x * x * x);
  return 0.5L * x * (1 + std::tanh(u));
}

inline long double gelu_tanh_derivative(long double x) {
  const long double k = std::sqrt(2 / 3.14159265358979323846L);
  const long double t = std::tanh(k * (x + 0.044715L * x * x * x));
  return 0.5L * (1 + t) + 0.5L * x * (1 - t * t) * k * (1 + 3 * 0.044715L * x * x);
}

}  // namespace kgpt::test
