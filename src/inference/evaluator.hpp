#pragma once
// Evaluation on the val split: every rank takes a contiguous share of the windows, and the loss,
// token and byte sums are added over ranks in double, so val_loss and val_bpb do not depend on the
// world size beyond rounding. Used by training and by `kgpt eval`.
// The windows: back-to-back sequences of seq_len tokens (train.eval_stride 0), or sliding windows
// (train.eval_stride S): window k starts at k S and scores only the positions no earlier window
// scored, so the first scores all seq_len and the others their last S; the last window ends where
// the split does. Every val token is scored exactly once either way, so val_bpb's bytes are the
// same; with windows each token but the first window's has at least seq_len - S tokens of context.
// With train.eval_isolate_documents no window reaches back across a document's start
// (document_windows), so each token's context is its own document's tokens before it.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <vector>

#include "config/deck.hpp"
#include "core/error.hpp"
#include "core/views.hpp"
#include "data/dataset_check.hpp"
#include "data/deck_tokenizer.hpp"
#include "data/shard.hpp"
#include "data/token_bytes.hpp"
#include "parallel/watchdog.hpp"
#include "parallel/world.hpp"

namespace kgpt::inference {

struct Evaluation {
  double loss = 0.0, bpb = 0.0;
  double seconds = 0.0;  // wall time of the evaluation on this rank, the sum over ranks included
};

// A window of seq_len tokens from `start`, scoring its positions [scored_from, scored_to).
struct EvalWindow {
  std::size_t start = 0;
  int scored_from = 0, scored_to = 0;
};

// The windows over `targets` positions (a multiple of seq, at least seq) with stride `stride` (0:
// back-to-back).
inline std::vector<EvalWindow> eval_windows(std::size_t targets, int seq, int stride) {
  std::vector<EvalWindow> windows;
  const std::size_t length = static_cast<std::size_t>(seq);
  if (stride == 0) {
    for (std::size_t start = 0; start + length <= targets; start += length) windows.push_back({start, 0, seq});
    return windows;
  }
  std::size_t scored_end = 0;  // the positions before it are scored
  for (std::size_t start = 0; scored_end < targets; start += static_cast<std::size_t>(stride)) {
    const std::size_t at = std::min(start, targets - length);  // the last window ends at the split's end
    windows.push_back({at, static_cast<int>(scored_end - at), seq});
    scored_end = at + length;
  }
  return windows;
}

// Windows that never reach back across a document's start, over `tokens` (their targets are
// tokens[1..]). A document starts at the split's start and at every `document_start` token, its
// first input (the previous document's last position predicts it). A document of up to seq
// positions is one window from its start, scoring only its own positions: the window's later
// positions read whatever follows (the next documents, or padding past the split's end), which a
// causal model's scored positions never see. A longer one gets the windows of eval_windows over its
// positions (stride 0 as back to back: a last window ending at the document's end). Every position
// is scored once.
inline std::vector<EvalWindow> document_windows(const std::vector<std::uint16_t>& tokens, int document_start, int seq,
                                                int stride) {
  std::vector<EvalWindow> windows;
  const std::size_t targets = tokens.size() - 1, length = static_cast<std::size_t>(seq);
  std::size_t begin = 0;
  for (std::size_t p = 1; p <= targets; ++p) {
    if (p < targets && tokens[p] != document_start) continue;
    const std::size_t positions = p - begin;  // the document [begin, p)
    if (positions <= length) {
      windows.push_back({begin, 0, static_cast<int>(positions)});
    } else {
      for (EvalWindow w : eval_windows(positions, seq, stride == 0 ? seq : stride)) {
        w.start += begin;
        windows.push_back(w);
      }
    }
    begin = p;
  }
  return windows;
}

class Evaluator {
 public:
  Evaluator(const config::ResolvedDeck& deck, int batch)
      : seq_(deck.config.train.seq_len),
        batch_(batch),
        stride_(deck.config.train.eval_stride),
        isolate_(deck.config.train.eval_isolate_documents),
        tokens_(data::load_val_tokens(deck)),
        table_(data::deck_token_table(deck.config.data, deck.config.model.vocab_size)),
        inputs_("kgpt::eval::inputs", batch, seq_),
        targets_("kgpt::eval::targets", batch, seq_),
        host_inputs_(Kokkos::create_mirror_view(inputs_)),
        host_targets_(Kokkos::create_mirror_view(targets_)) {
    if (isolate_ && table_.document_start < 0) {
      throw InputError(deck.where("train.eval_isolate_documents") + ": the tokenizer (" +
                       (deck.config.data.tokenizer == config::Tokenizer::byte ? "byte, model.vocab_size " +
                                                                                    std::to_string(deck.config.model.vocab_size)
                                                                              : deck.config.data.vocab_file) +
                       ") has no document start token to find the documents by");
    }
    windows_ = isolate_ ? document_windows(tokens_, table_.document_start, seq_, stride_)
                        : eval_windows(tokens_.size() - 1, seq_, stride_);
  }

  // Every rank evaluates its contiguous share of the windows; the loss, token and byte sums are
  // added over ranks in double, so the result does not depend on the world size beyond rounding.
  template <class Model>
  Evaluation run(const ExecSpace& exec, Model& model, int rank, int world_size) {
    const auto start = std::chrono::steady_clock::now();
    const std::size_t count = windows_.size();
    const std::size_t mine_begin = count * rank / world_size, mine_end = count * (rank + 1) / world_size;
    double sums[3] = {0, 0, 0};  // loss, tokens, bytes
    for (std::size_t first = mine_begin; first < mine_end; first += batch_) {
      const int rows = static_cast<int>(std::min<std::size_t>(batch_, mine_end - first));
      const std::size_t positions = tokens_.size() - 1;
      for (int r = 0; r < rows; ++r) {
        const EvalWindow& w = windows_[first + r];
        for (int t = 0; t < seq_; ++t) {
          const std::size_t at = w.start + t;
          // A document's window can reach past the split's end: padding there, never scored.
          host_inputs_(r, t) = at < positions ? tokens_[at] : 0;
          host_targets_(r, t) = at < positions ? tokens_[at + 1] : 0;
          if (t >= w.scored_from && t < w.scored_to) sums[2] += table_.bytes(tokens_[at], tokens_[at + 1]);
        }
      }
      const TokenMatrix inputs(inputs_.data(), rows, seq_), targets(targets_.data(), rows, seq_);
      Kokkos::deep_copy(exec, inputs, Kokkos::subview(host_inputs_, std::make_pair(0, rows), Kokkos::ALL()));
      Kokkos::deep_copy(exec, targets, Kokkos::subview(host_targets_, std::make_pair(0, rows), Kokkos::ALL()));
      if (first != mine_begin) model.reuse_weight_shadow();  // the weights do not change during an evaluation
      const double mean = model.forward(exec, inputs, targets);  // waits for the device
      if (stride_ == 0 && !isolate_) {
        // Back to back every position is scored: the device's mean, as training's loss takes it.
        sums[0] += mean * rows * seq_;
        sums[1] += static_cast<double>(rows) * seq_;
      } else {
        // Sliding or per-document windows: each row's scored positions' losses, read back and added
        // in double.
        const auto losses = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), model.token_losses());
        for (int r = 0; r < rows; ++r) {
          for (int t = windows_[first + r].scored_from; t < windows_[first + r].scored_to; ++t) {
            sums[0] += static_cast<double>(losses(static_cast<std::size_t>(r) * seq_ + t));
            sums[1] += 1;
          }
        }
      }
      parallel::progress();
    }
    Evaluation result = summed(sums);
    result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return result;
  }

  std::size_t tokens() const { return tokens_.size() - 1; }
  // Windows of seq_len tokens an evaluation runs forward (of all ranks together).
  std::size_t windows() const { return windows_.size(); }

 private:
  // The loss, token and byte sums of every rank added, and the figures from them.
  static Evaluation summed(double* sums) {
    parallel::progress_detail("summing the evaluation over ranks");
    parallel::sum_in_place(sums, 3);
    Evaluation result;
    result.loss = sums[0] / sums[1];
    result.bpb = data::bits_per_byte(result.loss, sums[1], sums[2]);
    return result;
  }

  int seq_, batch_, stride_;
  bool isolate_;
  std::vector<std::uint16_t> tokens_;
  data::TokenByteTable table_;
  TokenMatrix inputs_, targets_;
  TokenMatrix::HostMirror host_inputs_, host_targets_;
  std::vector<EvalWindow> windows_;
};

}  // namespace kgpt::inference
