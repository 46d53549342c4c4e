#pragma once
// A fresh folder under $TMPDIR (or /tmp) for one test, removed with everything in it afterwards.

#include <cstdint>
#include <string>
#include <vector>

namespace kgpt::test {

class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

std::string read_file(const std::string& path);
void write_file(const std::string& path, const std::string& contents);
bool file_exists(const std::string& path);

}  // namespace kgpt::test
