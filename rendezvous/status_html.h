// The status page's HTML (the / route of status_page.h): the whole page rendered from a snapshot, its
// style sheet and script embedded (status_page_assets.h), so that the page shows the job even where scripts
// do not run; the script then refreshes it from /status.json. Everything from workers is escaped
// (htmlEscape). Pure: safe from any thread; nothing throws but allocation.
#pragma once

#include <cstdint>
#include <string>

#include "base/job_monitor.h"

namespace hvd::rendezvous {

// The page's Content-Security-Policy header: nothing but inline CSS and JS and /status.json from this origin.
inline constexpr const char* kContentSecurityPolicy =
    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; "
    "img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

// The page for a snapshot taken at `now` (system clock, seconds): the overview and the access note only when
// `full` is false.
std::string pageHtml(const JobSnapshot& s, bool full, int64_t now);

}  // namespace hvd::rendezvous
