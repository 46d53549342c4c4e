#pragma once
// Evaluation on the val split: every rank takes a contiguous share of the val sequences, and the
// loss, token and byte sums are added over ranks in double, so val_loss and val_bpb do not depend
// on the world size beyond rounding. Used by training and by `kgpt eval`.

#include <algorithm>
#include <cstdint>
#include <vector>

#include "config/deck.hpp"
#include "core/error.hpp"
#include "core/views.hpp"
#include "data/dataset_check.hpp"
#include "data/shard.hpp"
#include "data/sentencepiece.hpp"
#include "data/token_bytes.hpp"
#include "parallel/watchdog.hpp"
#include "parallel/world.hpp"

namespace kgpt::inference {

struct Evaluation {
  double loss = 0.0, bpb = 0.0;
};

class Evaluator {
 public:
  Evaluator(const config::ResolvedDeck& deck, int batch)
      : seq_(deck.config.train.seq_len),
        batch_(batch),
        tokens_(data::load_val_tokens(deck)),
        table_(deck.config.data.tokenizer == config::Tokenizer::byte
                   ? data::byte_tokenizer_table(deck.config.model.vocab_size)
                   : data::load_sentencepiece_table(deck.config.data.vocab_file, deck.config.model.vocab_size)),
        inputs_("kgpt::eval::inputs", batch, seq_),
        targets_("kgpt::eval::targets", batch, seq_),
        host_inputs_(Kokkos::create_mirror_view(inputs_)),
        host_targets_(Kokkos::create_mirror_view(targets_)) {}

  // Every rank evaluates its contiguous share of the val sequences; the loss, token and byte sums
  // are added over ranks in double, so the result does not depend on the world size beyond
  // rounding.
  template <class Model>
  Evaluation run(const ExecSpace& exec, Model& model, int rank, int world_size) {
    const std::size_t sequences = (tokens_.size() - 1) / seq_;
    const std::size_t mine_begin = sequences * rank / world_size, mine_end = sequences * (rank + 1) / world_size;
    double sums[3] = {0, 0, 0};  // loss, tokens, bytes
    double& loss_sum = sums[0];
    double& token_count = sums[1];
    double& byte_count = sums[2];
    for (std::size_t first = mine_begin; first < mine_end; first += batch_) {
      const int rows = static_cast<int>(std::min<std::size_t>(batch_, mine_end - first));
      for (int r = 0; r < rows; ++r) {
        for (int t = 0; t < seq_; ++t) {
          const std::size_t at = (first + r) * seq_ + t;
          host_inputs_(r, t) = tokens_[at];
          host_targets_(r, t) = tokens_[at + 1];
          byte_count += table_.bytes(tokens_[at], tokens_[at + 1]);
        }
      }
      const TokenMatrix inputs(inputs_.data(), rows, seq_), targets(targets_.data(), rows, seq_);
      Kokkos::deep_copy(exec, inputs, Kokkos::subview(host_inputs_, std::make_pair(0, rows), Kokkos::ALL()));
      Kokkos::deep_copy(exec, targets, Kokkos::subview(host_targets_, std::make_pair(0, rows), Kokkos::ALL()));
      if (first != mine_begin) model.reuse_weight_shadow();  // the weights do not change during an evaluation
      const double mean = model.forward(exec, inputs, targets);
      loss_sum += mean * rows * seq_;
      token_count += static_cast<double>(rows) * seq_;
      parallel::progress();
    }
    parallel::progress_detail("summing the evaluation over ranks");
    parallel::sum_in_place(sums, 3);
    Evaluation result;
    result.loss = loss_sum / token_count;
    result.bpb = data::bits_per_byte(result.loss, token_count, byte_count);
    return result;
  }

  std::size_t tokens() const { return tokens_.size() - 1; }

 private:
  int seq_, batch_;
  std::vector<std::uint16_t> tokens_;
  data::TokenByteTable table_;
  TokenMatrix inputs_, targets_;
  TokenMatrix::HostMirror host_inputs_, host_targets_;
};

}  // namespace kgpt::inference
