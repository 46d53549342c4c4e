#include <catch2/catch.hpp>

#include <cstdlib>

#include "core/error.hpp"
#include "io/hdf5_file.hpp"
#include "support/process.hpp"
#include "support/temp_dir.hpp"

using kgpt::io::Hdf5File;

TEST_CASE("HDF5 datasets, strings and attributes round-trip and h5py reads them", "[io][hdf5]") {
  kgpt::test::TempDir dir;
  const std::string path = dir.file("t.h5");
  {
    Hdf5File file(path, Hdf5File::Mode::create);
    const std::vector<float> f = {1.5f, -2.0f, 3.25f, 0.0f, 7.0f, 8.0f};
    const std::vector<double> d = {0.1, 0.2};
    const std::vector<std::int64_t> i = {-3, 4, 5};
    file.write("params/blocks.0.weight", {2, 3}, f.data());
    file.write("loss", {2}, d.data());
    file.write("a/b/c/steps", {3}, i.data());
    file.write_string("meta/deck", "model:\n  n_layer: 2\n");
    file.set_attribute("loss", "units", "nats");
    file.set_attribute("loss", "scale", 0.5);
  }
  Hdf5File file(path, Hdf5File::Mode::read);
  CHECK(file.contains("params/blocks.0.weight"));
  CHECK_FALSE(file.contains("params/missing"));
  CHECK_FALSE(file.contains("nowhere/at/all"));
  CHECK(file.shape("params/blocks.0.weight") == std::vector<std::size_t>{2, 3});
  CHECK(file.read_doubles("params/blocks.0.weight") == std::vector<double>{1.5, -2.0, 3.25, 0.0, 7.0, 8.0});
  CHECK(file.read_doubles("a/b/c/steps") == std::vector<double>{-3, 4, 5});
  CHECK(file.read_string("meta/deck") == "model:\n  n_layer: 2\n");
  CHECK_THROWS_WITH(file.read_doubles("nope"), path + ": no dataset 'nope'");

  // h5py, the tool users open these files with, sees the same names, shapes, values and attributes.
  const std::string script =
      "import h5py, sys\n"
      "f = h5py.File(sys.argv[1], 'r')\n"
      "w = f['params/blocks.0.weight']\n"
      "assert w.shape == (2, 3) and w.dtype == 'float32' and w[1, 2] == 8.0, w\n"
      "assert list(f['a/b/c/steps'][:]) == [-3, 4, 5]\n"
      "deck = f['meta/deck'][()]\n"
      "deck = deck.decode() if isinstance(deck, bytes) else deck\n"
      "assert deck == 'model:\\n  n_layer: 2\\n', deck\n"
      "units = f['loss'].attrs['units']\n"
      "assert (units.decode() if isinstance(units, bytes) else units) == 'nats'\n"
      "assert f['loss'].attrs['scale'] == 0.5\n"
      "print('h5py ok')\n";
  kgpt::test::write_file(dir.file("check.py"), script);
  // Debian's Python with python3-h5py, or the one KGPT_TEST_PYTHON names (a GPU machine's own).
  const char* python = std::getenv("KGPT_TEST_PYTHON");
  const auto result = kgpt::test::run_process(python != nullptr ? python : "/usr/bin/python3", {dir.file("check.py"), path});
  INFO(result.err);
  CHECK(result.exit_code == 0);
  CHECK(result.out == "h5py ok\n");
}

TEST_CASE("HDF5 errors name the file", "[io][hdf5]") {
  kgpt::test::TempDir dir;
  CHECK_THROWS_WITH(Hdf5File(dir.file("missing.h5"), Hdf5File::Mode::read),
                    dir.file("missing.h5") + ": cannot open the HDF5 file (missing, unreadable, truncated or not HDF5)");
  kgpt::test::write_file(dir.file("not.h5"), "plain text");
  CHECK_THROWS_AS(Hdf5File(dir.file("not.h5"), Hdf5File::Mode::read), kgpt::Error);
}
