// libFuzzer target: bytes arriving on an hvd-proxy channel (either direction), fed to the frame decoder
// in chunks of a fuzzer-chosen size, as a real channel delivers them. Every complete frame is read with
// PayloadReader and, for kSpawn, decoded, re-encoded and decoded again.
// Invariants: malformed input only ever raises hvd::LaunchError (never a crash, another exception or an
// allocation beyond the frame); a decoded spawn request survives encode/decode unchanged.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "launcher/ssh/proxy_protocol.h"
#include "base/error.h"

namespace {

using namespace hvd::launcher::ssh;

bool sameSpawn(const SpawnRequest& a, const SpawnRequest& b) {
  return a.rank == b.rank && a.host == b.host && a.cwd == b.cwd && a.argv == b.argv && a.env == b.env &&
         a.forward_stdin == b.forward_stdin;
}

// Reads every field a frame of this type may hold, in order; a short payload throws LaunchError.
void readFields(const Frame& frame) {
  PayloadReader in(frame);
  if (frame.type == FrameType::kSpawn) {
    const SpawnRequest request = decodeSpawn(frame);
    FrameDecoder again;
    again.feed(encodeSpawn(request));
    const auto copy = again.next();
    if (!copy || again.pending() != 0 || !sameSpawn(decodeSpawn(*copy), request)) std::abort();
    return;
  }
  switch (frame.type) {
    case FrameType::kCheck: in.bytes(), in.u16(), in.u32(); break;
    case FrameType::kStdin: in.i32(), in.bytes(); break;
    case FrameType::kStdinEof: in.i32(); break;
    case FrameType::kSignal: in.i32(), in.i32(); break;
    case FrameType::kHello: in.u32(); break;
    case FrameType::kCheckResult: in.u8(), in.bytes(); break;
    case FrameType::kStarted: in.i32(), in.i32(); break;
    case FrameType::kOutput: in.i32(), in.u8(), in.bytes(); break;
    case FrameType::kExit: in.i32(), in.u8(), in.i32(); break;
    default: break;
  }
  in.end();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t chunk = data[0] % 61 + 1;
  const std::string_view stream(reinterpret_cast<const char*>(data) + 1, size - 1);
  FrameDecoder decoder;
  try {
    for (size_t at = 0; at < stream.size(); at += chunk) {
      decoder.feed(stream.substr(at, std::min(chunk, stream.size() - at)));
      while (auto frame = decoder.next()) {
        try {
          readFields(*frame);
        } catch (const hvd::LaunchError&) {
          // A malformed payload: the channel would report it and close.
        }
      }
    }
  } catch (const hvd::LaunchError&) {
    // An oversized length or an unknown type: the decoder stays failed, as on a real channel.
  }
  return 0;
}
