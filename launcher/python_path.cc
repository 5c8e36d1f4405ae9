#include "launcher/python_path.h"

#include <filesystem>
#include <mutex>
#include <system_error>

#include "hvd/config.h"
#include "base/error.h"

namespace hvd::launcher {

namespace fs = std::filesystem;

namespace {

std::optional<std::string> findPackageDir() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return std::nullopt;
  const fs::path bin = exe.parent_path();
  for (const fs::path& candidate : {bin / "python", bin.parent_path() / HVD_INSTALL_PYTHONDIR}) {
    if (fs::exists(candidate / "hvd" / "__init__.py", ec)) return candidate.lexically_normal().string();
  }
  // Installed by pip into a virtual environment: <env>/bin/hvdrun, <env>/lib/python3.X/site-packages/hvd.
  for (const auto& entry : fs::directory_iterator(bin.parent_path() / "lib", ec)) {
    const fs::path candidate = entry.path() / "site-packages";
    if (entry.path().filename().string().rfind("python3", 0) == 0 && fs::exists(candidate / "hvd" / "__init__.py", ec))
      return candidate.lexically_normal().string();
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::string> pythonPackageDir() {
  static std::once_flag once;
  static std::optional<std::string> dir;
  std::call_once(once, [] { dir = findPackageDir(); });
  return dir;
}

std::string workerPythonPath(bool horovod_compat, const std::string& inherited) {
  const auto dir = pythonPackageDir();
  if (!dir) {
    HVD_CHECK(!horovod_compat, UsageError,
              "--horovod-compat: hvd's Python package is not installed next to this hvdrun (no hvd/__init__.py "
              "in <hvdrun's folder>/python or <prefix>/", HVD_INSTALL_PYTHONDIR, ")");
    return inherited;
  }
  std::string path = *dir;
  if (horovod_compat) path = (fs::path(*dir) / "hvd" / "compat").string() + ":" + path;
  return inherited.empty() ? path : path + ":" + inherited;
}

}  // namespace hvd::launcher
