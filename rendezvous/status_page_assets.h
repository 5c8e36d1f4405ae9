// The status page's static parts (status_html.cc assembles the page around them), kept in assets/ as the
// files a browser would load and compiled in when the library is built: embed_asset.cmake writes each
// into a generated .cc in the build tree, again whenever the file changes.
//
// Each constant holds its file's bytes without the file's final newline, NUL-terminated. Constants: safe
// from any thread.
#pragma once

namespace hvd::rendezvous {

// assets/status.css: the page's style sheet.
extern const char kStatusPageStyle[];
// assets/status.js: the page's script. It renders /status.json into the same DOM the server renders,
// every second; text from workers goes in only as text nodes and attribute values (never innerHTML).
extern const char kStatusPageScript[];
// assets/access_note.html: the section shown in place of the details to a client without access.
extern const char kStatusPageAccessNote[];

}  // namespace hvd::rendezvous
