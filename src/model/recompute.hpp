#pragma once
// Which blocks keep their activations from the forward for the backward, and which rebuild them
// there by running their forward again (train.recompute: block; train.recompute_every: N rebuilds
// blocks 0, N, 2N, ... only, as Megatron's partial recompute does). A rebuilt block keeps only what the
// blocks around it read (its input or its output) and borrows one working set of buffers that
// every rebuilt block shares; a block that is not rebuilt has a working set of its own. The same
// numbering picks a block's attention statistics (attention_layer), so the two always agree.
//
// "Block" here is a layer the forward runs (model/block_sequence.hpp): under depth recurrence a
// repeated block's two layers each have their activations.
//
// Working sets are numbered in the order blocks first use them: the shared set (when any block is
// rebuilt) is set 0, used first by block 0. Everything here is arithmetic on the configuration, so
// the step may ask it without allocating.

#include <vector>

#include "config/config.hpp"
#include "model/block_sequence.hpp"

namespace kgpt::model {

class RecomputePlan {
 public:
  explicit RecomputePlan(const config::ModelConfig& m)
      : blocks_(run_layers(m)),
        recompute_(m.recompute == config::Recompute::block),
        every_(m.recompute_every > 0 ? m.recompute_every : 1) {}

  int blocks() const { return blocks_; }
  // Whether block l runs its forward again just before its backward.
  bool rebuilt(int l) const { return recompute_ && l % every_ == 0; }
  // How many blocks are rebuilt.
  int rebuilt_blocks() const { return recompute_ ? (blocks_ + every_ - 1) / every_ : 0; }
  // The working set block l uses: 0 when rebuilt, else 1 + the blocks before it that are not.
  int set(int l) const {
    if (!recompute_) return l;
    return rebuilt(l) ? 0 : l - l / every_;
  }
  // How many working sets the model holds.
  int sets() const { return recompute_ ? 1 + blocks_ - rebuilt_blocks() : blocks_; }
  // The blocks that use working set s, in order (for a declaration that sizes a set by its users).
  std::vector<int> users(int s) const {
    std::vector<int> found;
    for (int l = 0; l < blocks_; ++l) {
      if (set(l) == s) found.push_back(l);
    }
    return found;
  }
  // Whether block l is the first to use its working set (where a declaration names the set).
  bool first_user(int l) const { return users(set(l)).front() == l; }

 private:
  int blocks_;
  bool recompute_;
  int every_;
};

// The activations of a model's blocks, split as the plan splits them: per block, what it always
// keeps (Kept: the input or output the blocks around it read), and the working set its backward
// reads (Working), the block's own or the one the rebuilt blocks share.
template <class Kept, class Working>
class BlockActivations {
 public:
  const Kept& kept(int l) const { return kept_[static_cast<std::size_t>(l)]; }
  const Working& working(int l) const { return sets_[static_cast<std::size_t>(set_of_[static_cast<std::size_t>(l)])]; }

  // The one declaration of a model's blocks: declare_kept(Kept&) for every block, and
  // declare_working(Working&, users) for each working set as its first user is declared, with the
  // blocks that use it (for a set sized by what its users need).
  template <class DeclareKept, class DeclareWorking>
  void declare(const config::ModelConfig& m, DeclareKept&& declare_kept, DeclareWorking&& declare_working) {
    const RecomputePlan plan(m);
    kept_.assign(static_cast<std::size_t>(plan.blocks()), Kept{});
    sets_.assign(static_cast<std::size_t>(plan.sets()), Working{});
    set_of_.clear();
    for (int l = 0; l < plan.blocks(); ++l) {
      set_of_.push_back(plan.set(l));
      declare_kept(kept_[static_cast<std::size_t>(l)]);
      if (plan.first_user(l)) declare_working(sets_[static_cast<std::size_t>(plan.set(l))], plan.users(plan.set(l)));
    }
  }

 private:
  std::vector<Kept> kept_;
  std::vector<Working> sets_;
  std::vector<int> set_of_;
};

}  // namespace kgpt::model
