// usageCheck: the launcher's check for user input (flags, host specs, hostfiles, environment).
//
// Like HVD_CHECK(cond, UsageError, ...) but the message is exactly the given text: a user who mistyped a
// host spec needs the offending token, not the source location of the check (hvdrun prints it as
// "hvdrun: error: <message>" and exits 2).
#pragma once

#include <utility>

#include "base/error.h"

namespace hvd::launcher {

template <typename... Args>
void usageCheck(bool ok, Args&&... message) {
  if (!ok) throw UsageError(detail::concat(std::forward<Args>(message)...));
}

}  // namespace hvd::launcher
