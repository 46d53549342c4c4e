#pragma once
// What each attention implementation (model/attention/) can run, in one table: the deck's checks
// and reference, the implementations' constructors, resolve_attention and the probe ask it, so a
// new head size or a new implementation is written here once. It lives with the deck, which checks
// model.attention against it without reaching into the model.
//   gemm   any head dimension, any precision, every build
//   fused  head dimension 8, 16, 32, 64 or 128 (its accumulators stay in registers), any precision
//   cudnn  head dimension a multiple of 8 up to 128, bf16 only, CUDA builds with cuDNN

#include <string>

#include "config/config.hpp"
#include "core/backend.hpp"

namespace kgpt::config {

struct AttentionCapability {
  Attention kind;
  bool (*head_dim)(int d);     // whether it takes this head dimension
  const char* head_dims;       // the same, in words: "8, 16, 32, 64 or 128"
  bool bf16_only;              // reads bf16 inputs only (train.precision: bf16)
  bool built;                  // this build has it
};

inline const AttentionCapability& attention_capability(Attention kind) {
  static const AttentionCapability table[] = {
      {Attention::gemm, [](int) { return true; }, "any", false, true},
      {Attention::fused, [](int d) { return d == 8 || d == 16 || d == 32 || d == 64 || d == 128; },
       "8, 16, 32, 64 or 128", false, true},
      {Attention::cudnn, [](int d) { return d > 0 && d % 8 == 0 && d <= 128; }, "a multiple of 8 up to 128",
       true, backend::cudnn_built},
  };
  for (const auto& row : table) {
    if (row.kind == kind) return row;
  }
  return table[0];  // auto resolves to a row before anything asks (resolve_attention)
}

// Whether `kind` runs a model of this head dimension and precision in this build.
inline bool attention_runs(Attention kind, int head_dim, Precision precision) {
  const AttentionCapability& c = attention_capability(kind);
  return c.built && c.head_dim(head_dim) && (!c.bf16_only || precision == Precision::bf16);
}

}  // namespace kgpt::config
