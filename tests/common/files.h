// File helpers shared by the C++ tests.
#pragma once

#include <stdlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>

namespace hvd::test {

// The whole file, byte for byte; "" when it cannot be opened.
inline std::string readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// A new directory named `prefix` plus six random characters (mkdtemp), e.g. "/tmp/hvd_job_"; throws
// when it cannot be made. The caller removes it (TempDir does).
inline std::string makeTempDir(const std::string& prefix) {
  std::string path = prefix + "XXXXXX";
  if (!::mkdtemp(path.data())) throw std::runtime_error("mkdtemp " + path + ": " + std::strerror(errno));
  return path;
}

// A new directory (makeTempDir) that is removed with everything in it when the object goes, also when the
// test fails or throws, so that no run of the suite leaves anything in /tmp.
class TempDir {
 public:
  explicit TempDir(const std::string& prefix) : path_(makeTempDir(prefix)) {}
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace hvd::test
