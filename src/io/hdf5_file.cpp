#include "io/hdf5_file.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/error.hpp"
#include "core/text.hpp"
#include "io/hdf5_global_heap.hpp"

namespace kgpt::io {

namespace {

// Closes an HDF5 handle at scope exit.
class Handle {
 public:
  Handle(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  ~Handle() {
    if (id_ >= 0) close_(id_);
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  hid_t get() const { return id_; }
  bool ok() const { return id_ >= 0; }

 private:
  hid_t id_;
  herr_t (*close_)(hid_t);
};

// What went wrong underneath HDF5 (its error stack), for messages: the operating system's error when
// a file driver reports one ("File too large", "No space left on device"), else HDF5's innermost
// description; "" when the stack is empty. Clears the stack.
std::string error_detail() {
  std::string system, innermost;
  auto visit = [](unsigned, const H5E_error2_t* e, void* data) -> herr_t {
    auto* found = static_cast<std::pair<std::string, std::string>*>(data);
    const std::string desc = e->desc ? e->desc : "";
    const std::string marker = "error message = '";
    const auto at = desc.find(marker);
    if (at != std::string::npos && found->first.empty()) {
      const auto end = desc.find('\'', at + marker.size());
      found->first = desc.substr(at + marker.size(), end == std::string::npos ? std::string::npos : end - at - marker.size());
    }
    if (found->second.empty() && !desc.empty()) found->second = desc;
    return 0;
  };
  std::pair<std::string, std::string> found;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, visit, &found);
  H5Eclear2(H5E_DEFAULT);
  system = found.first;
  innermost = found.second;
  return system.empty() ? innermost : system;
}

// HDF5 closes the files still open at exit. After a write failed (disk full, file size limit) its
// close fails and leaves the file half-closed, and that exit-time clean-up then crashes inside the
// library. Every file here is closed by its Hdf5File, so the clean-up is not needed; turning it off
// must come before HDF5's first call, hence at start-up.
[[maybe_unused]] const bool exit_cleanup_off = [] {
  H5dont_atexit();
  return true;
}();

// Reads of one piece of metadata a SWMR reader tries before it gives up on a failing checksum.
constexpr unsigned kSwmrReadAttempts = 8;

// Rows per chunk of a series.
constexpr hsize_t kSeriesChunk = 1024;

// Whether an attribute holds exactly one value: reads below fill one value, and would write past it.
bool single_element(hid_t attribute) {
  Handle space(H5Aget_space(attribute), H5Sclose);
  return space.ok() && H5Sget_simple_extent_npoints(space.get()) == 1;
}

std::string with_detail(const std::string& message) {
  const std::string detail = error_detail();
  return detail.empty() ? message : message + ": " + detail;
}

}  // namespace

std::int64_t whole_number(double value, const std::string& what) {
  // 2^63 is exactly representable; every double below it converts to int64 exactly when whole.
  if (!(value >= -9223372036854775808.0 && value < 9223372036854775808.0) || value != std::trunc(value)) {
    throw InputError(what + " holds " + text::significant(value) + ", not a whole number (corrupted)");
  }
  return static_cast<std::int64_t>(value);
}

Hdf5File::Hdf5File(const std::string& path, Mode mode) : path_(path), mode_(mode) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);  // errors become exceptions with our context
  // SWMR needs the newest format; readers of other files may hold them open, so no file locks.
  Handle access(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  H5Pset_libver_bounds(access.get(), H5F_LIBVER_LATEST, H5F_LIBVER_LATEST);
  if (mode == Mode::create) {
    file_ = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, access.get());
  } else if (mode == Mode::read) {
    file_ = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    // A file whose SWMR writer is still running, or was killed, opens only as a SWMR reader. Such a
    // reader retries every metadata read whose checksum fails, in case the writer was midway through
    // it, with growing sleeps: by default 100 times, which on a corrupted file adds up to minutes per
    // object. A writer's flush is over within a few retries.
    if (file_ < 0) {
      Handle swmr(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
      H5Pset_metadata_read_attempts(swmr.get(), kSwmrReadAttempts);
      file_ = H5Fopen(path.c_str(), H5F_ACC_RDONLY | H5F_ACC_SWMR_READ, swmr.get());
    }
  } else {
    file_ = H5Fopen(path.c_str(), H5F_ACC_RDWR, access.get());
  }
  if (file_ < 0) {
    throw Error(mode == Mode::create ? ExitCode::failure : ExitCode::bad_input,
                mode == Mode::create ? with_detail(path + ": cannot create the HDF5 file")
                                     : path + ": cannot open the HDF5 file (missing, unreadable, truncated or not HDF5)");
  }
}

Hdf5File::~Hdf5File() {
  if (file_ >= 0) H5Fclose(file_);
}

void Hdf5File::fail(const std::string& what, const std::string& name) const {
  throw Error(mode_ == Mode::read ? ExitCode::bad_input : ExitCode::failure,
              with_detail(path_ + ": " + what + " '" + name + "'"));
}

void Hdf5File::make_parent_groups(const std::string& name) {
  for (std::size_t slash = name.find('/', 1); slash != std::string::npos; slash = name.find('/', slash + 1)) {
    const std::string group = name.substr(0, slash);
    if (H5Lexists(file_, group.c_str(), H5P_DEFAULT) > 0) continue;
    Handle created(H5Gcreate2(file_, group.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose);
    if (!created.ok()) fail("cannot create group", group);
  }
}

void Hdf5File::write_numeric(const std::string& name, const std::vector<std::size_t>& shape, hid_t type,
                             const void* data) {
  make_parent_groups(name);
  std::vector<hsize_t> dims(shape.begin(), shape.end());
  Handle space(dims.empty() ? H5Screate(H5S_SCALAR) : H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr),
               H5Sclose);
  Handle set(H5Dcreate2(file_, name.c_str(), type, space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Dclose);
  if (!space.ok() || !set.ok()) fail("cannot create dataset", name);
  if (H5Dwrite(set.get(), type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0) fail("cannot write dataset", name);
}

void Hdf5File::write(const std::string& name, const std::vector<std::size_t>& shape, const float* data) {
  write_numeric(name, shape, H5T_NATIVE_FLOAT, data);
}
void Hdf5File::write(const std::string& name, const std::vector<std::size_t>& shape, const double* data) {
  write_numeric(name, shape, H5T_NATIVE_DOUBLE, data);
}
void Hdf5File::write(const std::string& name, const std::vector<std::size_t>& shape, const std::int64_t* data) {
  write_numeric(name, shape, H5T_NATIVE_INT64, data);
}

void Hdf5File::write_string(const std::string& name, const std::string& text) {
  make_parent_groups(name);
  // A variable-length UTF-8 string: h5py reads it as str (bytes in older h5py).
  Handle type(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(type.get(), H5T_VARIABLE);
  H5Tset_cset(type.get(), H5T_CSET_UTF8);
  Handle space(H5Screate(H5S_SCALAR), H5Sclose);
  Handle set(H5Dcreate2(file_, name.c_str(), type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Dclose);
  if (!set.ok()) fail("cannot create dataset", name);
  const char* pointer = text.c_str();
  if (H5Dwrite(set.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, &pointer) < 0) fail("cannot write dataset", name);
}

void Hdf5File::set_attribute(const std::string& name, const std::string& key, const std::string& value) {
  Handle type(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(type.get(), H5T_VARIABLE);
  H5Tset_cset(type.get(), H5T_CSET_UTF8);
  Handle space(H5Screate(H5S_SCALAR), H5Sclose);
  Handle attribute(H5Acreate_by_name(file_, name.c_str(), key.c_str(), type.get(), space.get(), H5P_DEFAULT,
                                     H5P_DEFAULT, H5P_DEFAULT),
                   H5Aclose);
  const char* pointer = value.c_str();
  if (!attribute.ok() || H5Awrite(attribute.get(), type.get(), &pointer) < 0) fail("cannot write attribute " + key + " of", name);
}

void Hdf5File::set_attribute(const std::string& name, const std::string& key, double value) {
  Handle space(H5Screate(H5S_SCALAR), H5Sclose);
  Handle attribute(H5Acreate_by_name(file_, name.c_str(), key.c_str(), H5T_NATIVE_DOUBLE, space.get(), H5P_DEFAULT,
                                     H5P_DEFAULT, H5P_DEFAULT),
                   H5Aclose);
  if (!attribute.ok() || H5Awrite(attribute.get(), H5T_NATIVE_DOUBLE, &value) < 0) {
    fail("cannot write attribute " + key + " of", name);
  }
}

void Hdf5File::set_attribute(const std::string& name, const std::string& key, std::int64_t value) {
  Handle space(H5Screate(H5S_SCALAR), H5Sclose);
  Handle attribute(H5Acreate_by_name(file_, name.c_str(), key.c_str(), H5T_NATIVE_INT64, space.get(), H5P_DEFAULT,
                                     H5P_DEFAULT, H5P_DEFAULT),
                   H5Aclose);
  if (!attribute.ok() || H5Awrite(attribute.get(), H5T_NATIVE_INT64, &value) < 0) {
    fail("cannot write attribute " + key + " of", name);
  }
}

void Hdf5File::create_series(const std::string& name, SeriesType type) {
  make_parent_groups(name);
  const hsize_t initial = 0, unlimited = H5S_UNLIMITED, chunk = kSeriesChunk;
  Handle space(H5Screate_simple(1, &initial, &unlimited), H5Sclose);
  Handle properties(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  H5Pset_chunk(properties.get(), 1, &chunk);
  const hid_t element = type == SeriesType::float64 ? H5T_NATIVE_DOUBLE : H5T_NATIVE_INT64;
  Handle set(H5Dcreate2(file_, name.c_str(), element, space.get(), H5P_DEFAULT, properties.get(), H5P_DEFAULT),
             H5Dclose);
  if (!set.ok()) fail("cannot create series", name);
}

void Hdf5File::append_value(const std::string& name, hid_t type, const void* value) {
  Handle set(open_dataset(name), H5Dclose);
  hsize_t rows = 0;
  {
    Handle space(H5Dget_space(set.get()), H5Sclose);
    H5Sget_simple_extent_dims(space.get(), &rows, nullptr);
  }
  const hsize_t grown = rows + 1, one = 1;
  if (H5Dset_extent(set.get(), &grown) < 0) fail("cannot extend series", name);
  Handle file_space(H5Dget_space(set.get()), H5Sclose);
  H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, &rows, nullptr, &one, nullptr);
  Handle memory_space(H5Screate_simple(1, &one, nullptr), H5Sclose);
  if (H5Dwrite(set.get(), type, memory_space.get(), file_space.get(), H5P_DEFAULT, value) < 0) {
    fail("cannot append to series", name);
  }
  if (H5Dflush(set.get()) < 0) fail("cannot flush series", name);
}

void Hdf5File::append(const std::string& name, double value) { append_value(name, H5T_NATIVE_DOUBLE, &value); }
void Hdf5File::append(const std::string& name, std::int64_t value) { append_value(name, H5T_NATIVE_INT64, &value); }

void Hdf5File::resize_series(const std::string& name, std::size_t rows) {
  Handle set(open_dataset(name), H5Dclose);
  const hsize_t size = rows;
  if (H5Dset_extent(set.get(), &size) < 0) fail("cannot resize series", name);
}

void Hdf5File::start_swmr() {
  if (H5Fstart_swmr_write(file_) < 0) throw Error(ExitCode::failure, path_ + ": cannot start SWMR writing");
}

bool Hdf5File::contains(const std::string& name) const {
  // Each parent must exist before H5Lexists may be asked about the child.
  for (std::size_t slash = name.find('/', 1);; slash = name.find('/', slash + 1)) {
    const std::string part = name.substr(0, slash);
    if (H5Lexists(file_, part.c_str(), H5P_DEFAULT) <= 0) return false;
    if (slash == std::string::npos) return true;
  }
}

std::vector<std::string> Hdf5File::members(const std::string& group) const {
  if (!contains(group)) throw Error(ExitCode::bad_input, path_ + ": no group '" + group + "'");
  Handle handle(H5Gopen2(file_, group.c_str(), H5P_DEFAULT), H5Gclose);
  if (!handle.ok()) fail("cannot open group", group);
  // One pass in the order links are stored, sorted here: asking for a group's dense link storage in
  // name order (or by index) makes libhdf5 1.10 build a table of the links first, and on a corrupted
  // file its clean-up of a half-built table frees garbage (docs/fuzzing.md).
  std::vector<std::string> names;
  auto collect = [](hid_t, const char* name, const H5L_info_t*, void* data) -> herr_t {
    static_cast<std::vector<std::string>*>(data)->emplace_back(name);
    return 0;
  };
  if (H5Literate(handle.get(), H5_INDEX_NAME, H5_ITER_NATIVE, nullptr, collect, &names) < 0) fail("cannot list group", group);
  std::sort(names.begin(), names.end());
  return names;
}

hid_t Hdf5File::open_dataset(const std::string& name) const {
  if (!contains(name)) throw Error(ExitCode::bad_input, path_ + ": no dataset '" + name + "'");
  const hid_t set = H5Dopen2(file_, name.c_str(), H5P_DEFAULT);
  if (set < 0) fail("cannot open dataset", name);
  return set;
}

std::vector<std::size_t> Hdf5File::shape(const std::string& name) const {
  Handle set(open_dataset(name), H5Dclose);
  Handle space(H5Dget_space(set.get()), H5Sclose);
  const int rank = H5Sget_simple_extent_ndims(space.get());
  std::vector<hsize_t> dims(static_cast<std::size_t>(rank > 0 ? rank : 0));
  if (rank > 0) H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
  return std::vector<std::size_t>(dims.begin(), dims.end());
}

std::size_t Hdf5File::stored_count(hid_t set, const std::string& name) const {
  Handle space(H5Dget_space(set), H5Sclose);
  Handle type(H5Dget_type(set), H5Tclose);
  const hssize_t count = H5Sget_simple_extent_npoints(space.get());
  const std::size_t element = type.ok() ? H5Tget_size(type.get()) : 0;
  if (!space.ok() || count < 0 || element == 0) fail("cannot read the shape and type of dataset", name);
  // Every dataset kgpt writes has all its values in the file; one declaring more than the file
  // stores would otherwise be allocated (and filled in) at whatever size it claims. A series may
  // lack its last chunk: a writer stopped between growing it and writing the row.
  const hsize_t stored = H5Dget_storage_size(set);
  const auto values = static_cast<hsize_t>(count);
  hsize_t unwritten_allowed = 0;
  Handle creation(H5Dget_create_plist(set), H5Pclose);
  if (creation.ok() && H5Pget_layout(creation.get()) == H5D_CHUNKED && H5Pget_chunk(creation.get(), 0, nullptr) == 1) {
    hsize_t chunk = 0;
    H5Pget_chunk(creation.get(), 1, &chunk);
    unwritten_allowed = std::min<hsize_t>(chunk, kSeriesChunk);
  }
  if (values > stored / element + unwritten_allowed) {
    throw Error(ExitCode::bad_input, path_ + ": dataset '" + name + "' declares " + std::to_string(values) + " values of " +
                                         std::to_string(element) + " bytes but the file stores " +
                                         std::to_string(stored) + " bytes of them (corrupted or truncated)");
  }
  return static_cast<std::size_t>(values);
}

std::vector<double> Hdf5File::read_doubles(const std::string& name) const {
  Handle set(open_dataset(name), H5Dclose);
  std::vector<double> values(stored_count(set.get(), name));
  if (!values.empty() && H5Dread(set.get(), H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()) < 0) {
    fail("cannot read dataset", name);
  }
  return values;
}

double Hdf5File::read_scalar(const std::string& name) const {
  const std::vector<double> values = read_doubles(name);
  if (values.size() != 1) {
    throw Error(ExitCode::bad_input, path_ + ": dataset '" + name + "' holds " + std::to_string(values.size()) +
                                         " values, expected one");
  }
  return values[0];
}

std::int64_t Hdf5File::read_whole_scalar(const std::string& name) const {
  Handle set(open_dataset(name), H5Dclose);
  Handle type(H5Dget_type(set.get()), H5Tclose);
  if (H5Tget_class(type.get()) != H5T_INTEGER) return whole_number(read_scalar(name), path_ + ": dataset '" + name + "'");
  // Integers are read as integers: through a double, those past 2^53 would lose their last digits.
  if (stored_count(set.get(), name) != 1) {
    throw Error(ExitCode::bad_input, path_ + ": dataset '" + name + "' does not hold exactly one value");
  }
  std::int64_t value = 0;
  if (H5Dread(set.get(), H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, &value) < 0) fail("cannot read dataset", name);
  return value;
}

std::string Hdf5File::read_string(const std::string& name) const {
  Handle set(open_dataset(name), H5Dclose);
  Handle type(H5Dget_type(set.get()), H5Tclose);
  if (H5Tget_class(type.get()) != H5T_STRING || !H5Tis_variable_str(type.get())) fail("not a string dataset:", name);
  Handle space(H5Dget_space(set.get()), H5Sclose);
  // The read fills one pointer per element: exactly one, or it would write past `pointer`.
  if (H5Sget_simple_extent_npoints(space.get()) != 1) fail("not a single string:", name);
  check_string_storage(set.get(), false, "dataset '" + name + "'");
  char* pointer = nullptr;
  if (H5Dread(set.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, &pointer) < 0) fail("cannot read dataset", name);
  std::string text = pointer ? pointer : "";
  H5Dvlen_reclaim(type.get(), space.get(), H5P_DEFAULT, &pointer);
  return text;
}

void Hdf5File::read_floats(const std::string& name, float* out) const {
  Handle set(open_dataset(name), H5Dclose);
  stored_count(set.get(), name);
  if (H5Dread(set.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, out) < 0) fail("cannot read dataset", name);
}

std::string Hdf5File::dtype(const std::string& name) const {
  Handle set(open_dataset(name), H5Dclose);
  Handle type(H5Dget_type(set.get()), H5Tclose);
  const H5T_class_t type_class = H5Tget_class(type.get());
  const std::size_t size = H5Tget_size(type.get());
  if (type_class == H5T_FLOAT) return size == 4 ? "float32" : size == 8 ? "float64" : "other";
  if (type_class == H5T_INTEGER) return size == 8 ? "int64" : size == 4 ? "int32" : "other";
  if (type_class == H5T_STRING) return "string";
  return "other";
}

bool Hdf5File::has_attribute(const std::string& name, const std::string& key) const {
  return contains(name) && H5Aexists_by_name(file_, name.c_str(), key.c_str(), H5P_DEFAULT) > 0;
}

std::int64_t Hdf5File::read_attribute_whole(const std::string& name, const std::string& key) const {
  return whole_number(read_attribute_double(name, key), path_ + ": attribute '" + key + "' on '" + name + "'");
}

double Hdf5File::read_attribute_double(const std::string& name, const std::string& key) const {
  Handle attribute(H5Aopen_by_name(file_, name.c_str(), key.c_str(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  double value = 0;
  if (!attribute.ok() || !single_element(attribute.get()) || H5Aread(attribute.get(), H5T_NATIVE_DOUBLE, &value) < 0) {
    throw Error(ExitCode::bad_input, path_ + ": no numeric attribute '" + key + "' on '" + name + "'");
  }
  return value;
}

std::string Hdf5File::read_attribute_string(const std::string& name, const std::string& key) const {
  Handle attribute(H5Aopen_by_name(file_, name.c_str(), key.c_str(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  if (!attribute.ok()) throw Error(ExitCode::bad_input, path_ + ": no attribute '" + key + "' on '" + name + "'");
  Handle type(H5Aget_type(attribute.get()), H5Tclose);
  if (H5Tget_class(type.get()) != H5T_STRING || !H5Tis_variable_str(type.get()) || !single_element(attribute.get())) {
    throw Error(ExitCode::bad_input, path_ + ": attribute '" + key + "' on '" + name + "' is not a single string");
  }
  check_string_storage(attribute.get(), true, "attribute '" + key + "' on '" + name + "'");
  char* pointer = nullptr;
  if (H5Aread(attribute.get(), type.get(), &pointer) < 0) {
    throw Error(ExitCode::bad_input, path_ + ": cannot read attribute '" + key + "' on '" + name + "'");
  }
  std::string text = pointer ? pointer : "";
  H5free_memory(pointer);
  return text;
}

void Hdf5File::check_string_storage(hid_t object, bool is_attribute, const std::string& what) const {
  // The check reads the file itself, so what this process wrote must be there first.
  if (mode_ != Mode::read && H5Fflush(file_, H5F_SCOPE_LOCAL) < 0) {
    throw Error(ExitCode::failure, with_detail(path_ + ": cannot flush the HDF5 file"));
  }
  global_heap::check_string(file_, object, is_attribute, path_, what);
}

void Hdf5File::close() {
  if (file_ < 0) return;
  const herr_t closed = H5Fclose(file_);
  file_ = -1;
  if (closed < 0) throw Error(ExitCode::failure, with_detail(path_ + ": cannot close the HDF5 file"));
}

void Hdf5File::close_and_remove() {
  if (file_ >= 0) H5Fclose(file_);
  file_ = -1;
  std::remove(path_.c_str());
}

void Hdf5File::flush() {
  if (H5Fflush(file_, H5F_SCOPE_GLOBAL) < 0) throw Error(ExitCode::failure, with_detail(path_ + ": cannot flush the HDF5 file"));
}

}  // namespace kgpt::io
