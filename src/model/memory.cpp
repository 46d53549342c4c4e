#include "model/memory.hpp"

#include "core/backend.hpp"
#include "core/bf16.hpp"
#include "model/attention/attention.hpp"
#include "model/family.hpp"
#include "model/gemm/types.hpp"
#include "model/model_base.hpp"
#include "model/parameters.hpp"

namespace kgpt::model {

MemoryTarget this_build() { return MemoryTarget{backend::on_gpu, backend::cudnn_built}; }
MemoryTarget gpu_build() { return MemoryTarget{true, true}; }

namespace {

// What ModelBase<float, A> allocates beside the family's declared activations and the parameters.
template <class A>
std::size_t base_bytes(const config::ModelConfig& m, int max_batch, int max_seq, const MemoryTarget& target) {
  const std::size_t rows = static_cast<std::size_t>(max_batch) * max_seq;
  const auto vocab = static_cast<std::size_t>(m.vocab_size), width = static_cast<std::size_t>(m.d_model);
  std::size_t bytes = sizeof(double);  // LanguageModel's loss scalar
  bytes += TokenStage::bytes(max_batch, max_seq);
  bytes += OutputHead<float, A>::bytes(rows, vocab, width, target.gpu);
  bytes += rows * width * sizeof(A);  // d_final
  const SortedTables tables = sorted_tables(m);
  if (target.gpu) bytes += ops::EmbeddingSortSpace<float>::bytes(rows, tables.rows, tables.width);
  return bytes;
}

}  // namespace

ModelMemory model_memory(const config::ModelConfig& m, int max_batch, int max_seq, const MemoryTarget& target) {
  const Family& family = model::family(m.family);
  const std::size_t elements = family.layout(m, max_seq).buffer_size();
  const bool bf16_acts = m.precision == config::Precision::bf16;
  ModelMemory memory;
  memory.parameters = elements * sizeof(float);
  memory.gradients = elements * sizeof(float);
  memory.weight_shadow = bf16_acts ? elements * sizeof(bf16) : 0;
  memory.attention = resolve_attention(m, target.cudnn);
  const AttentionMemory attention =
      attention_memory(memory.attention, attention_shape(m, max_batch, max_seq), m.precision);
  memory.activations = family.activation_bytes(m, max_batch, max_seq) + attention.activations +
                       (bf16_acts ? base_bytes<bf16>(m, max_batch, max_seq, target)
                                  : base_bytes<float>(m, max_batch, max_seq, target));
  if (m.fp8 != config::Fp8::none) {
    const std::size_t rows = static_cast<std::size_t>(max_batch) * max_seq;
    const Fp8Sizes s = fp8_sizes(m);
    memory.fp8_operands = bf16_acts ? ops::Fp8Operands<bf16>::bytes(rows, s.input, s.output, s.weight)
                                    : ops::Fp8Operands<float>::bytes(rows, s.input, s.output, s.weight);
  }
  memory.library_workspace = attention.library_workspace + (target.gpu ? kCublasLtWorkspaceBytes : 0);
  return memory;
}

}  // namespace kgpt::model
