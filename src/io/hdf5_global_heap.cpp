#include "io/hdf5_global_heap.hpp"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <vector>

#include "core/error.hpp"

namespace kgpt::io::global_heap {

namespace {

// The collection layout of the HDF5 file format (global heap, version 1): "GCOL", a version byte,
// three reserved bytes and the collection's size, padded to 8 bytes; then objects, each a header
// (index: 2 bytes, reference count: 2, reserved: 4, size) padded to 8, and its data padded to 8.
// Index 0 is the free space, which includes its own header and ends the collection.
constexpr std::size_t kAlignment = 8;
constexpr std::uint64_t kMinimumCollection = 4096;  // libhdf5 never writes a smaller one
constexpr unsigned char kVersion = 1;

constexpr std::size_t aligned(std::size_t bytes) { return (bytes + kAlignment - 1) / kAlignment * kAlignment; }
std::size_t header_bytes(std::size_t length_bytes) { return aligned(4 + 1 + 3 + length_bytes); }
std::size_t object_header_bytes(std::size_t length_bytes) { return aligned(2 + 2 + 4 + length_bytes); }

// Little-endian, as every HDF5 integer is stored.
std::uint64_t decode(const unsigned char* bytes, std::size_t count) {
  std::uint64_t value = 0;
  for (std::size_t i = count; i-- > 0;) value = value << 8 | bytes[i];
  return value;
}

// The size a collection's header declares, after "GCOL", the version and three reserved bytes.
std::uint64_t declared_size(const unsigned char* header, std::size_t length_bytes) { return decode(header + 8, length_bytes); }

// A heap reference as stored: the sequence length (4 bytes), the collection's address, the
// object's index (4 bytes). Read through a conversion registered here, which copies those bytes out
// instead of following them; 32 bytes fits every address size HDF5 allows.
constexpr std::size_t kStoredReferenceMax = 32;
constexpr const char* kTag = "kgpt: a stored global heap reference";

herr_t copy_stored_reference(hid_t source, hid_t destination, H5T_cdata_t* conversion, std::size_t count,
                             std::size_t stride, std::size_t, void* buffer, void*, hid_t) {
  if (conversion->command == H5T_CONV_INIT) {
    if (H5Tis_variable_str(source) <= 0 || H5Tget_class(destination) != H5T_OPAQUE ||
        H5Tget_size(destination) != kStoredReferenceMax) {
      return -1;
    }
    char* tag = H5Tget_tag(destination);
    const bool ours = tag != nullptr && std::strcmp(tag, kTag) == 0;
    H5free_memory(tag);
    if (!ours) return -1;
    conversion->need_bkg = H5T_BKG_NO;
    return 0;
  }
  if (conversion->command != H5T_CONV_CONV) return 0;
  const std::size_t stored = H5Tget_size(source);
  if (stored == 0 || stored > kStoredReferenceMax) return -1;
  // In place, from the last element back, since each element grows.
  auto* bytes = static_cast<unsigned char*>(buffer);
  const std::size_t from_step = stride ? stride : stored, to_step = stride ? stride : kStoredReferenceMax;
  for (std::size_t i = count; i-- > 0;) {
    unsigned char element[kStoredReferenceMax] = {};
    std::memcpy(element, bytes + i * from_step, stored);
    std::memcpy(bytes + i * to_step, element, kStoredReferenceMax);
  }
  return 0;
}

// The memory type that reads stored references through copy_stored_reference.
hid_t stored_reference_type() {
  static const hid_t type = [] {
    const hid_t variable = H5Tcopy(H5T_C_S1);
    H5Tset_size(variable, H5T_VARIABLE);
    const hid_t opaque = H5Tcreate(H5T_OPAQUE, kStoredReferenceMax);
    H5Tset_tag(opaque, kTag);
    const herr_t registered = H5Tregister(H5T_PERS_SOFT, kTag, variable, opaque, copy_stored_reference);
    H5Tclose(variable);
    if (registered < 0) throw Error(ExitCode::failure, "cannot register the HDF5 conversion that checks string references");
    return opaque;
  }();
  return type;
}

}  // namespace

std::string collection_problem(const unsigned char* image, std::uint64_t available, std::size_t length_bytes,
                               const Reference& reference) {
  const std::size_t header = header_bytes(length_bytes), object_header = object_header_bytes(length_bytes);
  if (available < header) return "the file ends inside its header";
  if (std::memcmp(image, "GCOL", 4) != 0) return "no collection there (no GCOL signature)";
  if (image[4] != kVersion) return "version " + std::to_string(image[4]) + ", not 1";
  const std::uint64_t size = declared_size(image, length_bytes);
  if (size < kMinimumCollection) return "it declares " + std::to_string(size) + " bytes, fewer than the 4096 of any collection";
  if (size > available) {
    return "it declares " + std::to_string(size) + " bytes and the file holds " + std::to_string(available) + " from there";
  }
  // The walk libhdf5 makes when it loads the collection, with what it leaves unchecked refused: a
  // free space that does not end the collection (of size 0 libhdf5 loops on it forever) and an
  // object running past the collection's end (libhdf5 copies it out all the same).
  bool found = false;
  std::uint64_t found_size = 0;
  for (std::size_t at = header; at < size;) {
    const std::size_t left = static_cast<std::size_t>(size) - at;
    if (left < object_header) break;  // too small for an object: free space
    const auto index = static_cast<std::uint32_t>(decode(image + at, 2));
    const std::uint64_t object_size = decode(image + at + 8, length_bytes);
    if (index == 0) {
      if (object_size != left) {
        return "its free space at byte " + std::to_string(at) + " declares " + std::to_string(object_size) +
               " bytes where " + std::to_string(left) + " are left";
      }
      break;
    }
    if (object_size > left - object_header || aligned(static_cast<std::size_t>(object_size)) > left - object_header) {
      return "object " + std::to_string(index) + " declares " + std::to_string(object_size) + " bytes where " +
             std::to_string(left - object_header) + " are left";
    }
    if (index == reference.object) {
      found = true;
      found_size = object_size;
    }
    at += object_header + aligned(static_cast<std::size_t>(object_size));
  }
  if (!found) return "it holds no object " + std::to_string(reference.object);
  if (found_size != reference.length) {
    return "object " + std::to_string(reference.object) + " holds " + std::to_string(found_size) +
           " bytes for a string of " + std::to_string(reference.length);
  }
  return "";
}

void check_string(hid_t file, hid_t object, bool is_attribute, const std::string& path, const std::string& what) {
  auto refuse = [&](const std::string& why) { throw Error(ExitCode::bad_input, path + ": " + what + ": " + why); };

  const hid_t space = is_attribute ? H5Aget_space(object) : H5Dget_space(object);
  const hssize_t elements = space < 0 ? -1 : H5Sget_simple_extent_npoints(space);
  if (space >= 0) H5Sclose(space);
  if (elements != 1) refuse("not a single string");

  unsigned char stored[kStoredReferenceMax] = {};
  const herr_t read = is_attribute ? H5Aread(object, stored_reference_type(), stored)
                                   : H5Dread(object, stored_reference_type(), H5S_ALL, H5S_ALL, H5P_DEFAULT, stored);
  if (read < 0) refuse("cannot read where the string is stored");

  hsize_t base = 0;
  std::size_t address_bytes = 0, length_bytes = 0;
  const hid_t creation = H5Fget_create_plist(file);
  const bool sized = creation >= 0 && H5Pget_userblock(creation, &base) >= 0 &&
                     H5Pget_sizes(creation, &address_bytes, &length_bytes) >= 0;
  if (creation >= 0) H5Pclose(creation);
  if (!sized) refuse("cannot read the file's address sizes");
  if (address_bytes > 8 || length_bytes > 8) {
    refuse("addresses of " + std::to_string(address_bytes) + " bytes and lengths of " + std::to_string(length_bytes) +
           " are not read here (at most 8)");
  }

  Reference reference;
  reference.length = static_cast<std::uint32_t>(decode(stored, 4));
  reference.collection = decode(stored + 4, address_bytes);
  reference.object = static_cast<std::uint32_t>(decode(stored + 4 + address_bytes, 4));
  if (reference.collection == 0) return;  // a null string: libhdf5 reads nothing

  // Straight from the file: what libhdf5 will load into its cache.
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  const std::streamoff end = in ? static_cast<std::streamoff>(in.tellg()) : -1;
  if (end < 0) refuse("cannot read the file");
  const auto file_size = static_cast<std::uint64_t>(end);
  const std::string where = "its characters' collection at byte " + std::to_string(reference.collection) + " ";
  if (reference.collection >= file_size || base > file_size - reference.collection) {
    refuse(where + "is past the end of the file (" + std::to_string(file_size) + " bytes; corrupted)");
  }
  const std::uint64_t start = base + reference.collection, available = file_size - start;
  const std::size_t header = header_bytes(length_bytes);
  std::vector<unsigned char> image(static_cast<std::size_t>(std::min<std::uint64_t>(available, header)));
  in.seekg(static_cast<std::streamoff>(start));
  in.read(reinterpret_cast<char*>(image.data()), static_cast<std::streamsize>(image.size()));
  // The rest only for a collection's header declaring a size the file holds; else the header tells.
  if (image.size() == header && std::memcmp(image.data(), "GCOL", 4) == 0) {
    const std::uint64_t declared = declared_size(image.data(), length_bytes);
    if (declared <= available && declared > header) {
      image.resize(static_cast<std::size_t>(declared));
      in.read(reinterpret_cast<char*>(image.data() + header), static_cast<std::streamsize>(declared - header));
    }
  }
  if (!in) refuse("cannot read the file");
  const std::string problem = collection_problem(image.data(), available, length_bytes, reference);
  if (!problem.empty()) refuse(where + "is corrupted: " + problem);
}

}  // namespace kgpt::io::global_heap
