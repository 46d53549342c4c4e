#pragma once
// The attention sublayer's own weights, as every family composes them: the QKV projection (one
// stacked product, or q, k and v apart) and the output projection. The attention between them is
// the model's (ModelBase::attend over the heads of model/attention/heads.hpp's HeadShape), with
// whatever the family does to q and k first (RoPE, with or without norms and gains).

#include "model/layers/projection.hpp"
#include "model/ops/linear.hpp"

namespace kgpt::model::layers {

template <class T, class A>
struct AttentionProjections {
  Projection<T, A> qkv;   // (N, C) -> (N, H D + 2 KV D): q, k, v side by side
  ops::Linear<T, A> out;  // (N, H D) -> (N, C)
};

}  // namespace kgpt::model::layers
