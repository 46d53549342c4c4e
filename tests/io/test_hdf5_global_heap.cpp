#include <catch2/catch.hpp>

#include <hdf5.h>

#include <cstring>
#include <fstream>

#include "core/error.hpp"
#include "io/hdf5_file.hpp"
#include "io/hdf5_global_heap.hpp"
#include "support/temp_dir.hpp"

using kgpt::io::Hdf5File;
namespace global_heap = kgpt::io::global_heap;

namespace {

// A collection image laid out as the HDF5 file format describes it (8-byte lengths), built here
// byte by byte; the tests on real files below check that libhdf5 writes the same layout.
class CollectionImage {
 public:
  explicit CollectionImage(std::uint64_t size) : bytes_(size, 0) {
    std::memcpy(bytes_.data(), "GCOL", 4);
    bytes_[4] = 1;
    put(8, size, 8);
    at_ = 16;
  }
  // An object: index, reference count 1, size, then its data padded to 8 bytes.
  CollectionImage& object(std::uint16_t index, const std::string& data, std::uint64_t declared_size) {
    put(at_, index, 2);
    put(at_ + 2, 1, 2);
    put(at_ + 8, declared_size, 8);
    std::memcpy(bytes_.data() + at_ + 16, data.data(), data.size());
    at_ += 16 + (data.size() + 7) / 8 * 8;
    return *this;
  }
  CollectionImage& object(std::uint16_t index, const std::string& data) { return object(index, data, data.size()); }
  // The free space: index 0, its size counting its own header.
  CollectionImage& free_space(std::uint64_t declared_size) {
    put(at_, 0, 2);
    put(at_ + 8, declared_size, 8);
    return *this;
  }
  std::uint64_t left() const { return bytes_.size() - at_; }
  unsigned char* data() { return bytes_.data(); }
  std::size_t size() const { return bytes_.size(); }

 private:
  void put(std::size_t at, std::uint64_t value, std::size_t count) {
    for (std::size_t i = 0; i < count; ++i) bytes_[at + i] = static_cast<unsigned char>(value >> (8 * i));
  }
  std::vector<unsigned char> bytes_;
  std::size_t at_;
};

global_heap::Reference reference(std::uint32_t object, std::uint32_t length) {
  global_heap::Reference r;
  r.collection = 4096;
  r.object = object;
  r.length = length;
  return r;
}

std::string problem(CollectionImage& image, const global_heap::Reference& r) {
  return global_heap::collection_problem(image.data(), image.size(), 8, r);
}

// The byte offset of the first global heap collection in a file, and the offset within it of the
// header of object `index`, walking it by the file format's rules.
struct Located {
  std::size_t collection = 0, object = 0;
};
Located locate(const std::string& bytes, std::uint16_t index) {
  Located found;
  found.collection = bytes.find("GCOL");
  REQUIRE(found.collection != std::string::npos);
  auto number = [&](std::size_t at, std::size_t count) {
    std::uint64_t value = 0;
    for (std::size_t i = count; i-- > 0;) value = value << 8 | static_cast<unsigned char>(bytes[found.collection + at + i]);
    return value;
  };
  const std::uint64_t size = number(8, 8);
  for (std::size_t at = 16; at + 16 <= size;) {
    if (number(at, 2) == index) {
      found.object = at;
      return found;
    }
    at += 16 + (number(at + 8, 8) + 7) / 8 * 8;
  }
  FAIL("no object " << index << " in the collection");
  return found;
}

void patch(const std::string& path, std::size_t at, std::uint64_t value, std::size_t count) {
  std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
  file.seekp(static_cast<std::streamoff>(at));
  for (std::size_t i = 0; i < count; ++i) file.put(static_cast<char>(value >> (8 * i)));
  REQUIRE(file.good());
}

// The message of what `read` throws, after checking that it is a bad-input Error.
template <typename Read>
std::string refusal(Read read) {
  try {
    read();
  } catch (const kgpt::Error& e) {
    CHECK(e.code() == kgpt::ExitCode::bad_input);
    return e.what();
  }
  FAIL("the read was not refused");
  return "";
}

}  // namespace

TEST_CASE("collection_problem accepts the collections libhdf5 writes", "[io][hdf5][global_heap]") {
  CollectionImage image(4096);
  image.object(1, "hello world").object(2, "").object(3, "abcdefgh");
  image.free_space(image.left());
  CHECK(problem(image, reference(1, 11)) == "");
  CHECK(problem(image, reference(2, 0)) == "");
  CHECK(problem(image, reference(3, 8)) == "");

  // Full to within less than an object header: the rest is free space without a header.
  CollectionImage full(4096);
  full.object(1, std::string(4096 - 16 - 16 - 8, 'x'));
  REQUIRE(full.left() == 8);
  CHECK(problem(full, reference(1, 4096 - 40)) == "");

  // A string longer than the minimum collection gets a collection of its own size.
  CollectionImage large(8192);
  large.object(1, std::string(8000, 'y')).free_space(large.left());
  CHECK(problem(large, reference(1, 8000)) == "");
}

TEST_CASE("collection_problem refuses what would make libhdf5 loop, overrun or read garbage", "[io][hdf5][global_heap]") {
  SECTION("a free space of 0 bytes, on which libhdf5 loops forever") {
    CollectionImage image(4096);
    image.object(1, "hello").free_space(0);
    CHECK(problem(image, reference(1, 5)) == "its free space at byte 40 declares 0 bytes where 4056 are left");
  }
  SECTION("a free space that does not end the collection") {
    CollectionImage image(4096);
    image.free_space(64);
    CHECK(problem(image, reference(1, 5)) == "its free space at byte 16 declares 64 bytes where 4080 are left");
  }
  SECTION("an object running past the collection's end, which libhdf5 would copy out") {
    CollectionImage image(4096);
    image.object(1, "hello", 4394623961908ULL);
    CHECK(problem(image, reference(1, 5)) == "object 1 declares 4394623961908 bytes where 4064 are left");
    CollectionImage wrapping(4096);
    wrapping.object(1, "hello", ~0ULL - 3);
    CHECK(problem(wrapping, reference(1, 5)) == "object 1 declares 18446744073709551612 bytes where 4064 are left");
  }
  SECTION("a reference to an object the collection does not hold, or to its free space") {
    CollectionImage image(4096);
    image.object(1, "hello");
    image.free_space(image.left());
    CHECK(problem(image, reference(2, 5)) == "it holds no object 2");
    CHECK(problem(image, reference(70000, 5)) == "it holds no object 70000");
    CHECK(problem(image, reference(0, 5)) == "it holds no object 0");
  }
  SECTION("an object whose size is not the string's length (libhdf5 copies the object into a buffer of that length)") {
    CollectionImage image(4096);
    image.object(1, "hello world");
    image.free_space(image.left());
    CHECK(problem(image, reference(1, 4)) == "object 1 holds 11 bytes for a string of 4");
  }
  SECTION("a header that is not a collection's") {
    CollectionImage image(4096);
    image.data()[3] = 'X';
    CHECK(problem(image, reference(1, 5)) == "no collection there (no GCOL signature)");
    CollectionImage version(4096);
    version.data()[4] = 2;
    CHECK(problem(version, reference(1, 5)) == "version 2, not 1");
    CollectionImage small(4096);
    small.data()[9] = 0;  // declares 0 bytes
    CHECK(problem(small, reference(1, 5)) == "it declares 0 bytes, fewer than the 4096 of any collection");
    CHECK(global_heap::collection_problem(small.data(), 10, 8, reference(1, 5)) == "the file ends inside its header");
  }
  SECTION("a collection declaring more bytes than the file holds from its address on") {
    CollectionImage image(4096);
    image.free_space(image.left());
    CHECK(global_heap::collection_problem(image.data(), 4000, 8, reference(1, 5)) ==
          "it declares 4096 bytes and the file holds 4000 from there");
  }
}

TEST_CASE("strings kgpt wrote read back, and their corrupted collections are refused with the file and the name",
          "[io][hdf5][global_heap]") {
  kgpt::test::TempDir dir;
  const std::string path = dir.file("strings.h5");
  {
    Hdf5File file(path, Hdf5File::Mode::create);
    file.write_string("/metadata/deck", "hello world");
    file.write_string("/metadata/empty", "");
    file.set_attribute("/metadata", "kgpt_version", "1.2.3");
  }
  {
    const Hdf5File file(path, Hdf5File::Mode::read);
    CHECK(file.read_string("/metadata/deck") == "hello world");
    CHECK(file.read_string("/metadata/empty") == "");
    CHECK(file.read_attribute_string("/metadata", "kgpt_version") == "1.2.3");
  }
  const std::string pristine = kgpt::test::read_file(path);
  const Located deck = locate(pristine, 1);
  auto restore = [&] { kgpt::test::write_file(path, pristine); };
  const std::string where = path + ": dataset '/metadata/deck': its characters' collection at byte " +
                            std::to_string(deck.collection) + " is corrupted: ";

  SECTION("the deck's object made longer than its collection") {
    patch(path, deck.collection + deck.object + 8, 4394623961908ULL, 8);
    const Hdf5File file(path, Hdf5File::Mode::read);
    CHECK(refusal([&] { file.read_string("/metadata/deck"); }) ==
          where + "object 1 declares 4394623961908 bytes where " + std::to_string(4096 - 16 - 16) + " are left");
    // The attribute, read the same way, is refused as well: the collection is shared.
    CHECK_THAT(refusal([&] { file.read_attribute_string("/metadata", "kgpt_version"); }),
               Catch::StartsWith(path + ": attribute 'kgpt_version' on '/metadata': its characters' collection at byte"));
  }
  SECTION("the free space made 0 bytes long") {
    const Located free_space = locate(pristine, 0);
    patch(path, deck.collection + free_space.object + 8, 0, 8);
    const Hdf5File file(path, Hdf5File::Mode::read);
    CHECK_THAT(refusal([&] { file.read_string("/metadata/deck"); }),
               Catch::StartsWith(where + "its free space at byte " + std::to_string(free_space.object) + " declares 0 bytes"));
  }
  SECTION("the deck's object given another index") {
    patch(path, deck.collection + deck.object, 9, 2);
    const Hdf5File file(path, Hdf5File::Mode::read);
    CHECK(refusal([&] { file.read_string("/metadata/deck"); }) == where + "it holds no object 1");
  }
  SECTION("the collection's signature overwritten") {
    patch(path, deck.collection, 0, 4);
    const Hdf5File file(path, Hdf5File::Mode::read);
    CHECK(refusal([&] { file.read_string("/metadata/deck"); }) == where + "no collection there (no GCOL signature)");
  }
  SECTION("the collection declaring more than the file holds") {
    patch(path, deck.collection + 8, 1ULL << 40, 8);
    const Hdf5File file(path, Hdf5File::Mode::read);
    CHECK_THAT(refusal([&] { file.read_string("/metadata/deck"); }),
               Catch::StartsWith(where + "it declares 1099511627776 bytes and the file holds"));
  }
  restore();
  const Hdf5File file(path, Hdf5File::Mode::read);
  CHECK(file.read_string("/metadata/deck") == "hello world");
}

TEST_CASE("a file with a user block: its collections are found after it", "[io][hdf5][global_heap]") {
  // Addresses in an HDF5 file count from the end of its user block; h5py users make such files.
  kgpt::test::TempDir dir;
  const std::string path = dir.file("user_block.h5");
  {
    const hid_t creation = H5Pcreate(H5P_FILE_CREATE);
    H5Pset_userblock(creation, 512);
    const hid_t file = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, creation, H5P_DEFAULT);
    const hid_t type = H5Tcopy(H5T_C_S1);
    H5Tset_size(type, H5T_VARIABLE);
    const hid_t space = H5Screate(H5S_SCALAR);
    const hid_t set = H5Dcreate2(file, "deck", type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    const char* text = "after the user block";
    REQUIRE(H5Dwrite(set, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, &text) >= 0);
    H5Dclose(set);
    H5Sclose(space);
    H5Tclose(type);
    H5Fclose(file);
    H5Pclose(creation);
  }
  {
    const Hdf5File file(path, Hdf5File::Mode::read);
    CHECK(file.read_string("deck") == "after the user block");
  }
  const std::string bytes = kgpt::test::read_file(path);
  const Located deck = locate(bytes, 1);
  REQUIRE(deck.collection >= 512);
  patch(path, deck.collection + deck.object + 8, 21, 8);  // padded to the same 24 bytes
  const Hdf5File file(path, Hdf5File::Mode::read);
  CHECK(refusal([&] { file.read_string("deck"); }) ==
        path + ": dataset 'deck': its characters' collection at byte " + std::to_string(deck.collection - 512) +
            " is corrupted: object 1 holds 21 bytes for a string of 20");
}
