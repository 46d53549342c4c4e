#pragma once
// Rotary position embedding's tables, built once per model, and the shape of the q and k heads the
// RoPE kernels walk (ops/qk_norm_rope.hpp; llama's rotation, golf's with q/k norms and gains): q's
// heads from the QKV matrix's first column, k's from the column after q's.

#include <string>

#include "core/views.hpp"
#include "model/attention/heads.hpp"
#include "model/ops/qk_norm_rope.hpp"

namespace kgpt::model::layers {

template <class T>
class RotaryTables {
 public:
  RotaryTables() = default;
  // Angles t / base^(2i / R) for positions t < max_seq and pairs i < R / 2 (model.rope_base), R the
  // rotated dimensions of a head: rotated_dims (golf's model.rope_dims), or 0 for all D of them; the
  // pairs after R / 2 get angle 0.
  RotaryTables(const std::string& prefix, int max_seq, const HeadShape& heads, double base, int rotated_dims = 0)
      : cos_(prefix + "rope_cos", max_seq, heads.dim / 2), sin_(prefix + "rope_sin", max_seq, heads.dim / 2), heads_(heads),
        rotated_pairs_(rotated_dims / 2) {
    ops::rope_tables(cos_, sin_, base, static_cast<std::size_t>(rotated_pairs_));
  }
  ConstMatrix<T> cos() const { return cos_; }
  ConstMatrix<T> sin() const { return sin_; }
  // The q and k head rows of a micro-batch of sequences of `seq` tokens.
  ops::QkShape shape(int seq) const {
    return ops::QkShape{heads_.heads, heads_.kv_heads, heads_.dim, seq, 0, static_cast<int>(heads_.k_column()),
                        rotated_pairs_};
  }

 private:
  Matrix<T> cos_, sin_;
  HeadShape heads_;
  int rotated_pairs_ = 0;
};

}  // namespace kgpt::model::layers
