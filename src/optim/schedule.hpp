#pragma once
// Learning-rate schedule: a multiplier applied to every group's learning rate at a step.
//   warmup:   (step + 1) / (warmup_steps + 1) for step < warmup_steps (nanoGPT's ramp)
//   constant: 1 after warmup
//   cosine:   min_lr_fraction + (1 - min_lr_fraction) * (1 + cos(pi * p)) / 2, p = progress after warmup
//   warmdown: parameter-golf's linear decay to 0 over the last warmdown_iters steps; with a
//             wall-clock cap, over the last warmdown_iters * (mean step time) seconds instead.
// The warmdown factor multiplies the others; decks with a cosine schedule usually set warmdown_iters 0.

#include "config/config.hpp"

namespace kgpt::optim {

// `elapsed_seconds` is the training time so far (all ranks agree on it); it matters only when
// train.max_wallclock_seconds > 0.
double lr_multiplier(const config::TrainConfig& train, int step, double elapsed_seconds);

}  // namespace kgpt::optim
