// The frames hvdrun and hvd-proxy exchange over one ssh exec channel (stdin: launcher -> proxy,
// stdout: proxy -> launcher; the proxy's own diagnostics go to the channel's stderr, unframed).
//
// Frame: u32 payload length (big-endian, at most kMaxProxyFrame), u8 type, payload. Payload fields are
// big-endian integers and length-prefixed byte strings (u32 length, bytes), so values may hold any bytes
// (spaces, quotes, newlines, NULs, non-UTF-8).
//
// The proxy's first frame is kHello, preceded on stdout by kProxyHelloMagic; bytes before the magic (a login
// script that prints on a non-interactive shell) are skipped. Everything after the magic is frames.
//
//   launcher -> proxy                               proxy -> launcher
//   kCheck     address, u16 port, u32 timeout ms    kHello       u32 version
//   kSpawn     SpawnRequest                         kCheckResult u8 ok, text (why not)
//   kStdin     i32 rank, bytes                      kStarted     i32 rank, i32 pid
//   kStdinEof  i32 rank                             kOutput      i32 rank, u8 stream, bytes
//   kSignal    i32 rank (-1: every rank), i32 signo kExit        i32 rank, u8 kind, i32 value
//   kHeartbeat (empty)
//
// kExit kind: 0 exited (value = code), 1 signaled (value = signal). A rank that cannot be started
// (missing directory, fork failure, --bind-to core beyond the host's cores) gets a kOutput on stderr with the
// reason and a kExit, like a local worker. Version 2 added SpawnRequest::bind_index. Threading: plain
// functions and value types, no shared state.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace hvd::launcher::ssh {

inline constexpr uint32_t kProxyVersion = 2;
// Written by the proxy right before its kHello frame.
inline constexpr std::string_view kProxyHelloMagic{"\nHVD-PROXY\n", 11};
// Largest payload either side accepts: a job description (environment, argv) fits many times over.
inline constexpr uint32_t kMaxProxyFrame = 16u << 20;

// On the wire: launcher-to-proxy frames from 1, proxy-to-launcher frames from 64. A new frame type goes at
// the end of its side's run, and a change to an existing value needs a new kProxyVersion.
enum class FrameType : uint8_t {
  kCheck = 1,
  kSpawn,
  kStdin,
  kStdinEof,
  kSignal,
  kHeartbeat,
  kHello = 64,
  kCheckResult,
  kStarted,
  kOutput,
  kExit,
};

struct Frame {
  FrameType type = FrameType::kHeartbeat;
  std::string payload;
};

// Appends payload fields.
class PayloadWriter {
 public:
  PayloadWriter& u8(uint8_t v);
  PayloadWriter& u16(uint16_t v);
  PayloadWriter& u32(uint32_t v);
  PayloadWriter& i32(int32_t v) { return u32(static_cast<uint32_t>(v)); }
  PayloadWriter& bytes(std::string_view v);
  // The complete frame: length, type, payload. Throws LaunchError when the payload exceeds kMaxProxyFrame.
  std::string frame(FrameType type) const;

 private:
  std::string out_;
};

// Reads payload fields in order; throws LaunchError ("truncated <what> frame") when the payload ends
// early, so a malformed frame is an error, never a crash.
class PayloadReader {
 public:
  PayloadReader(const Frame& frame) : data_(frame.payload), what_(typeName(frame.type)) {}
  uint8_t u8();
  uint16_t u16();
  uint32_t u32();
  int32_t i32() { return static_cast<int32_t>(u32()); }
  std::string bytes();
  // Throws when bytes are left over (the frame does not match its type).
  void end() const;

  static const char* typeName(FrameType type);

 private:
  void need(size_t n) const;
  std::string_view data_;
  size_t pos_ = 0;
  const char* what_;
};

// Splits a byte stream into frames. Throws LaunchError naming the problem (oversized length, unknown
// type) so the caller can report it and drop the channel; after an error the decoder stays failed.
class FrameDecoder {
 public:
  void feed(std::string_view bytes) { buffer_.append(bytes); }
  // The next complete frame, or nullopt when more bytes are needed.
  std::optional<Frame> next();
  // Bytes received but not yet part of a complete frame (a truncated stream at EOF).
  size_t pending() const { return buffer_.size() - pos_; }

 private:
  std::string buffer_;
  size_t pos_ = 0;
};

// What the proxy needs to start one rank.
struct SpawnRequest {
  int rank = -1;
  std::string host;  // as hvdrun names it, for messages
  std::string cwd;
  std::vector<std::string> argv;
  std::vector<std::pair<std::string, std::string>> env;  // applied over the proxy's own environment
  bool forward_stdin = false;                            // stdin arrives as kStdin/kStdinEof frames
  int bind_index =
      -1;  // --bind-to core: bound to the proxy's bind_index-th core (cpu_binding.h); -1: not bound
};

std::string encodeSpawn(const SpawnRequest& request);
SpawnRequest decodeSpawn(const Frame& frame);

}  // namespace hvd::launcher::ssh
