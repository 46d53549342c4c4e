#pragma once
// A guard in front of libhdf5's reads of variable-length strings. Their characters live in the
// file's global heap, in collections that no checksum covers, and libhdf5 1.10 trusts the sizes it
// finds there: a corrupted collection makes it loop forever or copy past its buffers
// (docs/fuzzing.md). Before a string is read, check_string reads its heap reference without
// following it, reads the collection it points into straight from the file, and walks it the way
// libhdf5 will, refusing anything that libhdf5 could not walk safely or that no writer produces.

#include <hdf5.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace kgpt::io::global_heap {

// Where a variable-length value's bytes are: `length` bytes in object `object` of the collection
// at file address `collection` (relative to the file's base, after any user block).
struct Reference {
  std::uint32_t length = 0;
  std::uint64_t collection = 0;
  std::uint32_t object = 0;
};

// What is wrong with the collection at `image` for reading `reference` from it; "" when libhdf5 can
// read it safely. `available`: how many bytes the file holds from the collection's address on;
// `image` holds the first min(available, declared size) of them, or only the header when it
// declares more than that. `length_bytes`: the file's size of lengths (8 in the files kgpt and h5py
// write).
std::string collection_problem(const unsigned char* image, std::uint64_t available, std::size_t length_bytes,
                               const Reference& reference);

// Checks the single variable-length string held by `object` (a dataset or an attribute of `file`,
// which was opened from `path`) before libhdf5 reads it. Throws Error(bad_input) naming the file,
// `what` ("dataset '/metadata/deck'") and the fault.
void check_string(hid_t file, hid_t object, bool is_attribute, const std::string& path, const std::string& what);

}  // namespace kgpt::io::global_heap
