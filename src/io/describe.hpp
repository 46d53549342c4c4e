#pragma once
// What `kgpt inspect` prints of a file or a run directory (its history, checkpoints and log tail): a checkpoint's state, versions and tensors with their norms;
// an artifact's origin and tensors; a history's rows, last and best losses and tokens/s. Refuses
// anything else, and anything corrupted, with InputError naming the file.

#include <ostream>
#include <string>

namespace kgpt::io {

void describe_file(const std::string& path, std::ostream& out);

}  // namespace kgpt::io
