#pragma once
// A small RAII layer over the HDF5 C library: named, shaped datasets of float, double and int64,
// string datasets and attributes, groups created on demand from "a/b/name" paths. Every failure
// throws Error naming the file and the dataset.

#include <hdf5.h>

#include <cstdint>
#include <string>
#include <vector>

namespace kgpt::io {

class Hdf5File {
 public:
  enum class Mode { create, read };
  // create: a new file (truncating one that exists); read: an existing file, read-only.
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

  bool contains(const std::string& name) const;
  std::vector<std::size_t> shape(const std::string& name) const;
  std::vector<double> read_doubles(const std::string& name) const;  // any numeric type, converted
  std::string read_string(const std::string& name) const;

  void flush();
  const std::string& path() const { return path_; }

 private:
  void write_numeric(const std::string& name, const std::vector<std::size_t>& shape, hid_t type, const void* data);
  hid_t open_dataset(const std::string& name) const;
  void make_parent_groups(const std::string& name);
  [[noreturn]] void fail(const std::string& what, const std::string& name) const;

  std::string path_;
  hid_t file_ = -1;
};

}  // namespace kgpt::io
