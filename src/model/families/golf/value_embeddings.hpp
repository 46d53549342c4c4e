#pragma once
// Golf's value embeddings (model.value_embed_layers; parameter-golf's SP1024 record of 2026-03-31):
// one table of V rows of model.value_embed_dim, read at each position's token, projected to the
// key/value width where it is narrower, scaled by a learned scalar from 0.1: the shared base
//   e = s * (table[tok] W^T)                                   (N, KV D)
// which each listed layer j adds, scaled by a learned scalar of its own from 1, to its values before
// the attention reads them (not to q or k):  v_l += g_j * e.
//   backward: dg_j += sum over all elements of dv_l e;  de += g_j dv_l (over the listed layers);
//             ds += sum of de p, dp = s de (p the projected rows), then the projection's and the
//             table's gradients (model/layers/table.hpp).
// The scalars' gradients are column sums added in a fixed order (ops/bigram.hpp's scalar-scale
// backward), so they are the same on every run.

#include <string>
#include <type_traits>
#include <vector>

#include "config/config.hpp"
#include "config/module_keys.hpp"
#include "core/bf16.hpp"
#include "core/error.hpp"
#include "core/views.hpp"
#include "model/ops/launch.hpp"

namespace kgpt::model::golf {

inline constexpr const char* kValueEmbedLayersKey = "model.value_embed_layers";
inline constexpr const char* kValueEmbedDimKey = "model.value_embed_dim";

// The layers (as run, counted from 0) the deck lists, in its order; "" lists none. Throws naming the
// key for a list that is not comma-separated whole numbers (the family's check words it for a deck).
inline std::vector<int> value_embed_layers(const config::ModelConfig& m) {
  const std::string text = config::module_string(m.family_keys, kValueEmbedLayersKey);
  std::vector<int> layers;
  std::size_t at = 0;
  while (at < text.size()) {
    std::size_t end = text.find(',', at);
    if (end == std::string::npos) end = text.size();
    std::string item = text.substr(at, end - at);
    item.erase(0, item.find_first_not_of(' '));
    item.erase(item.find_last_not_of(' ') + 1);
    if (item.empty() || item.size() > 6 || item.find_first_not_of("0123456789") != std::string::npos) {
      throw InputError(std::string(kValueEmbedLayersKey) + ": '" + text +
                       "' is not a list of layer numbers separated by commas (\"9,10\")");
    }
    layers.push_back(std::stoi(item));
    at = end + 1;
  }
  return layers;
}
inline int value_embed_dim(const config::ModelConfig& m) {
  return static_cast<int>(config::module_integer(m.family_keys, kValueEmbedDimKey));
}

namespace {  // kernels: internal linkage, see core/kernel.hpp

// y = s x (s a vector of one), or with `add`, y += s x.
template <class T, class Scale, class X, class Y>
void scalar_scale(const ExecSpace& exec, const Scale& scale, const X& x, const Y& y, bool add) {
  using A = typename Y::value_type;
  const RowView<const std::remove_const_t<typename X::value_type>> in(x);
  const RowView<A> out(y);
  const auto* s = scale.data();
  ops::for_each_element(exec, add ? "kgpt::golf::value_embed::add" : "kgpt::golf::value_embed::scale", x.extent(0),
                        x.extent(1), KOKKOS_LAMBDA(const std::size_t i, const std::size_t j) {
                          const T term = T(s[0]) * T(in(i, j));
                          out(i, j) = store<A>(add ? T(out(i, j)) + term : term);
                        });
}

}  // namespace

}  // namespace kgpt::model::golf
