// File helpers shared by the C++ tests.
#pragma once

#include <fstream>
#include <sstream>
#include <string>

namespace hvd::test {

// The whole file, byte for byte; "" when it cannot be opened.
inline std::string readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace hvd::test
