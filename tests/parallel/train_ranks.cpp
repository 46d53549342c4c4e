// Trains a deck on every rank of an MPI job, as `kgpt train` does, and has each rank write what
// the data-parallel tests compare to <out>.rank<R>.h5: the per-step train losses, gradient norms and
// gradient averaging counters, the clipping norm, the val results, and this rank's final parameters.
//   mpiexec -n W train_ranks DECK OUT [section.key=value]...

#include <iostream>
#include <string>
#include <vector>

#include "config/deck.hpp"
#include "core/error.hpp"
#include "core/kokkos_compat.hpp"
#include "io/hdf5_file.hpp"
#include "io/run_log.hpp"
#include "parallel/world.hpp"
#include "train/trainer.hpp"

int main(int argc, char** argv) {
  kgpt::parallel::MpiSession mpi(&argc, &argv);
  if (argc < 3) {
    std::cerr << "usage: train_ranks DECK OUT [section.key=value]...\n";
    return 2;
  }
  const auto& world = kgpt::parallel::world();
  try {
    kgpt::compat::Runtime kokkos;
    kgpt::config::DeckOptions options;
    options.world_size = world.size;
    for (int i = 3; i < argc; ++i) options.overrides.push_back(argv[i]);
    const auto deck = kgpt::config::load_deck(argv[1], options);
    kgpt::io::RunLog silent;
    std::vector<float> parameters;
    kgpt::train::TrainOptions train_options;
    train_options.final_parameters = &parameters;
    const auto summary = kgpt::train::run_training(deck, silent, train_options);

    std::vector<double> losses, norms;
    std::vector<std::int64_t> calls, bytes, early_calls, gather_calls, gather_bytes;
    for (const auto& step : summary.history) {
      losses.push_back(step.train_loss);
      norms.push_back(step.grad_norm);
      calls.push_back(step.allreduce_calls);
      bytes.push_back(step.allreduce_bytes);
      early_calls.push_back(step.allreduce_calls_before_last_micro_step);
      gather_calls.push_back(step.allgather_calls);
      gather_bytes.push_back(step.allgather_bytes);
    }
    const std::size_t steps = losses.size();
    kgpt::io::Hdf5File out(std::string(argv[2]) + ".rank" + std::to_string(world.rank) + ".h5",
                           kgpt::io::Hdf5File::Mode::create);
    out.write("train_loss", {steps}, losses.data());
    out.write("grad_norm", {steps}, norms.data());
    out.write("grad_clip_norm", {}, &deck.config.train.grad_clip_norm);
    out.write("allreduce_calls", {steps}, calls.data());
    out.write("allreduce_bytes", {steps}, bytes.data());
    out.write("allreduce_calls_before_last_micro_step", {steps}, early_calls.data());
    out.write("allgather_calls", {steps}, gather_calls.data());
    out.write("allgather_bytes", {steps}, gather_bytes.data());
    out.write("val_loss", {}, &summary.final_val_loss);
    out.write("val_bpb", {}, &summary.final_val_bpb);
    out.write("parameters", {parameters.size()}, parameters.data());
    out.set_attribute("parameters", "world_size", static_cast<double>(world.size));
    out.set_attribute("parameters", "grad_accum_steps", static_cast<double>(deck.plan.grad_accum_steps));
  } catch (const kgpt::Error& e) {
    std::cerr << "train_ranks: rank " << world.rank << ": " << e.what() << "\n";
    kgpt::parallel::abort_all(static_cast<int>(e.code()));
  }
  return 0;
}
