#include "core/files.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/error.hpp"

namespace kgpt {

namespace {

bool write_all(int fd, const char* bytes, std::size_t size) {
  while (size > 0) {
    const ssize_t n = ::write(fd, bytes, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    bytes += n;
    size -= static_cast<std::size_t>(n);
  }
  return true;
}

}  // namespace

void write_file_atomically(const std::string& path, const std::vector<ByteRange>& pieces) {
  const std::string temporary = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) throw Error(ExitCode::failure, temporary + ": cannot create: " + std::strerror(errno));
  bool ok = true;
  for (const auto& piece : pieces) ok = ok && write_all(fd, static_cast<const char*>(piece.data), piece.size);
  ok = ok && ::fsync(fd) == 0;
  int error = errno;
  ok = ::close(fd) == 0 && ok;
  if (ok && std::rename(temporary.c_str(), path.c_str()) != 0) {
    ok = false;
    error = errno;
  }
  if (!ok) {
    std::remove(temporary.c_str());
    throw Error(ExitCode::failure, path + ": cannot write: " + std::strerror(error));
  }
}

void write_file_atomically(const std::string& path, const std::string& contents) {
  write_file_atomically(path, {ByteRange{contents.data(), contents.size()}});
}

void make_directories(const std::string& path) {
  for (std::size_t slash = path.find('/', 1); ; slash = path.find('/', slash + 1)) {
    const std::string partial = path.substr(0, slash);
    if (::mkdir(partial.c_str(), 0755) != 0 && errno != EEXIST) {
      throw InputError(partial + ": cannot create folder: " + std::strerror(errno));
    }
    if (slash == std::string::npos) break;
  }
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0 || !S_ISDIR(info.st_mode)) {
    throw InputError(path + ": exists and is not a folder");
  }
}

}  // namespace kgpt
