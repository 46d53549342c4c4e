#pragma once
// A small RAII layer over the HDF5 C library: named, shaped datasets of float, double and int64,
// string datasets and attributes, groups created on demand from "a/b/name" paths, and extendible
// 1-D series that grow by one row at a time (histories), readable while they grow (SWMR). Every
// failure throws Error naming the file and the dataset: exit code 2 (bad input) for a file opened
// to be read, since then the file is what is wrong, and 1 for a file being written.

#include <hdf5.h>

#include <cstdint>
#include <string>
#include <vector>

namespace kgpt::io {

// `value` as int64, or InputError "<what> holds <value>, not a whole number" when it is not a whole
// number in int64's range (the conversion would be undefined).
std::int64_t whole_number(double value, const std::string& what);

class Hdf5File {
 public:
  enum class Mode { create, read, append };
  // create: a new file (truncating one that exists), in the newest file format so that it can be
  // written in SWMR mode later; read: an existing file, read-only; append: an existing file, read
  // and write.
  Hdf5File(const std::string& path, Mode mode);
  ~Hdf5File();
  Hdf5File(const Hdf5File&) = delete;
  Hdf5File& operator=(const Hdf5File&) = delete;

  void write(const std::string& name, const std::vector<std::size_t>& shape, const float* data);
  void write(const std::string& name, const std::vector<std::size_t>& shape, const double* data);
  void write(const std::string& name, const std::vector<std::size_t>& shape, const std::int64_t* data);
  void write_string(const std::string& name, const std::string& text);
  void set_attribute(const std::string& name, const std::string& key, const std::string& value);
  void set_attribute(const std::string& name, const std::string& key, double value);

  void set_attribute(const std::string& name, const std::string& key, std::int64_t value);

  // Series: 1-D extendible, chunked datasets of double or int64.
  enum class SeriesType { float64, int64 };
  void create_series(const std::string& name, SeriesType type);
  void append(const std::string& name, double value);
  void append(const std::string& name, std::int64_t value);
  void resize_series(const std::string& name, std::size_t rows);
  // Single-writer/multi-reader from here on: readers (h5py swmr=True) see every flushed row. No
  // dataset or attribute may be created after this.
  void start_swmr();

  bool contains(const std::string& name) const;
  // Names of the members of a group, sorted.
  std::vector<std::string> members(const std::string& group) const;
  std::vector<std::size_t> shape(const std::string& name) const;
  // Any numeric type, converted. A dataset whose values are not all stored in the file (a corrupted
  // or foreign file declaring more than it holds) is refused before anything is allocated.
  std::vector<double> read_doubles(const std::string& name) const;
  // A dataset of exactly one value; the _whole forms also refuse a value that is not a whole
  // number in the range of int64 (converted to int64 it would be undefined).
  double read_scalar(const std::string& name) const;
  std::int64_t read_whole_scalar(const std::string& name) const;
  std::string read_string(const std::string& name) const;
  // Exactly, into out (as many floats as the dataset holds).
  void read_floats(const std::string& name, float* out) const;
  // "float32", "float64", "int64", "int32", "string" or "other".
  std::string dtype(const std::string& name) const;
  bool has_attribute(const std::string& name, const std::string& key) const;
  double read_attribute_double(const std::string& name, const std::string& key) const;
  std::int64_t read_attribute_whole(const std::string& name, const std::string& key) const;
  std::string read_attribute_string(const std::string& name, const std::string& key) const;

  void flush();
  // Closes the file and deletes it (a file that must not be left behind half written).
  void close_and_remove();
  // Closes the file now, throwing Error(failure) with the system's reason when the last writes fail.
  void close();
  const std::string& path() const { return path_; }

 private:
  void append_value(const std::string& name, hid_t type, const void* value);
  void write_numeric(const std::string& name, const std::vector<std::size_t>& shape, hid_t type, const void* data);
  hid_t open_dataset(const std::string& name) const;
  void make_parent_groups(const std::string& name);
  [[noreturn]] void fail(const std::string& what, const std::string& name) const;
  // How many values `set` holds, after checking that the file stores every byte of them.
  std::size_t stored_count(hid_t set, const std::string& name) const;
  // Before libhdf5 reads a string: its characters' storage must be one libhdf5 can read safely
  // (io/hdf5_global_heap.hpp).
  void check_string_storage(hid_t object, bool is_attribute, const std::string& what) const;

  std::string path_;
  Mode mode_;
  hid_t file_ = -1;
};

}  // namespace kgpt::io
