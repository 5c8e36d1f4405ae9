// File helpers shared by the C++ tests.
#pragma once

#include <stdlib.h>

#include <cerrno>
#include <cstring>
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
// when it cannot be made. The caller removes it, if at all.
inline std::string makeTempDir(const std::string& prefix) {
  std::string path = prefix + "XXXXXX";
  if (!::mkdtemp(path.data())) throw std::runtime_error("mkdtemp " + path + ": " + std::strerror(errno));
  return path;
}

}  // namespace hvd::test
