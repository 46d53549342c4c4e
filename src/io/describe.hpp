#pragma once
// What `kgpt inspect` prints: of a run directory, its history, checkpoints and log tail; of a
// checkpoint, its state, versions and tensors with their norms; of an artifact, its origin and
// tensors; of a history, its rows, last and best losses and tokens/s. Refuses anything else, and
// anything corrupted, with InputError naming the file.

#include <ostream>
#include <string>

namespace kgpt::io {

void describe_file(const std::string& path, std::ostream& out);

}  // namespace kgpt::io
