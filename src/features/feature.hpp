#pragma once
// Step features: what a training step does around the model besides the forward, the backward and
// the update (docs/design.md, "Step features"). Each is a folder of its own beside this file and one
// line of features/registry.cpp, and says through this interface what it does around the update,
// around evaluation, in checkpoints and in the memory plan; the trainer, the benchmark, the memory
// plan and `kgpt eval/sample/export --weights` walk the registry and name no feature.

#include <string>
#include <vector>

#include "config/config.hpp"
#include "core/backend.hpp"
#include "core/views.hpp"
#include "io/checkpoint.hpp"

namespace kgpt::features {

// A row of the memory plan (train/memory_plan.hpp): device memory a feature allocates.
struct MemoryRow {
  std::string name;
  double bytes = 0;
  std::string how;  // how it is sized, in words
};

class StepFeature {
 public:
  virtual ~StepFeature() = default;
  // In words, as the profile names its work ("weight averages").
  virtual const char* name() const = 0;

  // A new run starts from `values`, the weights every rank now holds (a resumed one restores).
  virtual void start(const ExecSpace& /*exec*/, const Vector<float>& /*values*/) {}
  // Before the micro-steps of step `step` (counted from 0), at the schedule's multiplier: may change
  // the weights the forward and backward read. Returns a line for the run's log when it starts
  // acting, else "".
  virtual std::string before_micro_steps(const ExecSpace& /*exec*/, int /*step*/, double /*lr_multiplier*/,
                                         const Vector<float>& /*values*/) {
    return "";
  }
  // After the micro-steps and the gradients' averaging, before the optimizer reads them: the weights
  // must be the live ones again.
  virtual void before_update(const ExecSpace& /*exec*/, const Vector<float>& /*values*/) {}
  // After the optimizer's step `step` (counted from 0) changed the weights.
  virtual void after_update(const ExecSpace& /*exec*/, int /*step*/, double /*lr_multiplier*/,
                            const Vector<float>& /*values*/) {}

  // Evaluation of `weights`: when this feature keeps them and they stand for a model yet, exchanges
  // them with `values` and returns true (a second call undoes it); otherwise does nothing.
  virtual bool swap_weights(const ExecSpace& /*exec*/, config::Weights /*weights*/, const Vector<float>& /*values*/) {
    return false;
  }

  // Checkpoints: the groups it keeps this run (their names), its state into `state`, and back from
  // a checkpoint's (throwing InputError naming `path` when it lacks what this run keeps).
  virtual std::vector<std::string> checkpoint_groups() const { return {}; }
  virtual void save(io::FeatureState& /*state*/) const {}
  virtual void restore(const std::string& /*path*/, const io::FeatureState& /*state*/) {}
};

}  // namespace kgpt::features
