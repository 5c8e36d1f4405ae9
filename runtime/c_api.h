// Internals of the C API shared by the files that implement hvd/hvd.h functions (c_api.cc,
// elastic_state.cc): where exceptions become status codes and the per-thread error text is set.
#pragma once

#include <exception>
#include <string>

namespace hvd::runtime::capi {

// Sets this thread's hvd_error_text() to text; returns status.
int fail(int status, std::string text);

// The hvd_status of an exception (setting the error text to its message).
int statusOf(std::exception_ptr error);

}  // namespace hvd::runtime::capi
