// Where hvdrun's workers find the hvd Python package without the user setting anything.
//
// hvdrun puts the package's folder in front of every worker's PYTHONPATH: <folder of hvdrun>/python in a
// build tree, <prefix>/<HVD_INSTALL_PYTHONDIR> in an installation, <env>/lib/python3.X/site-packages in a
// virtual environment pip installed into (remote hosts are assumed to have the same prefix, as for
// hvd-proxy). With --horovod-compat it also puts hvd's compatibility package in front,
// so that `import horovod.torch` resolves to hvd.torch (the package itself says so, in one line on
// stderr, when it shadows a real Horovod installation).
#pragma once

#include <optional>
#include <string>

namespace hvd::launcher {

// The folder holding hvd/__init__.py next to this hvdrun, or nullopt when there is none (a build without
// the Python package, or an hvdrun copied elsewhere).
std::optional<std::string> pythonPackageDir();

// PYTHONPATH for a worker: the package folder (and its compat/ folder when horovod_compat), then the
// inherited value. Throws UsageError when horovod_compat is asked for and the package is missing.
std::string workerPythonPath(bool horovod_compat, const std::string& inherited);

}  // namespace hvd::launcher
