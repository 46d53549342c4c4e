#pragma once
// File-system helpers. Whole-file writes never leave a half-written file under the final name:
// the bytes go to a temporary file beside the target, are flushed to disk, and the temporary is
// renamed.

#include <cstddef>
#include <string>
#include <vector>

namespace kgpt {

struct ByteRange {
  const void* data;
  std::size_t size;
};

// Throws Error(failure) naming the file when it cannot be written.
void write_file_atomically(const std::string& path, const std::vector<ByteRange>& pieces);
void write_file_atomically(const std::string& path, const std::string& contents);

// mkdir -p. Throws InputError naming the folder when it cannot be created or is not a folder.
void make_directories(const std::string& path);

}  // namespace kgpt
