#pragma once
// What every fuzz harness holds a reader to: given any bytes it returns, or throws kgpt's
// InputError (exit code 2 and a message naming the file). Anything else (another exception, a crash,
// a hang, a sanitizer report) is a finding. The reader sees the bytes as a file, as kgpt reads them.

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <sstream>
#include <string>

#include "core/error.hpp"
#include "io/describe.hpp"

namespace kgpt::fuzz {

// A file of this process holding `data`, named with `extension` (readers that look at it).
inline std::string as_file(const std::uint8_t* data, std::size_t size, const std::string& extension) {
  const std::string path = "/tmp/kgpt_fuzz_" + std::to_string(::getpid()) + extension;
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(reinterpret_cast<const char*>(data),
                                                                  static_cast<std::streamsize>(size));
  return path;
}

// Runs `read`; an InputError is the expected refusal, anything else thrown aborts with its text.
template <class Read>
void expect_clear_refusal(const Read& read) {
  try {
    read();
  } catch (const InputError&) {
  } catch (const Error& e) {
    if (e.code() == ExitCode::bad_input) return;
    std::fprintf(stderr, "fuzz: a reader failed with exit code %d instead of refusing the input: %s\n",
                 static_cast<int>(e.code()), e.what());
    std::abort();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz: a reader threw something other than kgpt's InputError: %s\n", e.what());
    std::abort();
  }
}

// The file at `path` read as `kgpt inspect` reads it (checkpoints, histories, artifacts).
inline void expect_inspect_reads_or_refuses(const std::string& path) {
  expect_clear_refusal([&] {
    std::ostringstream summary;
    io::describe_file(path, summary);
  });
}

}  // namespace kgpt::fuzz
