#include "launcher/ssh/proxy_protocol.h"

#include "base/enum_names.h"
#include "base/error.h"

namespace hvd::launcher::ssh {

namespace {

bool knownType(uint8_t t) {
  return (t >= static_cast<uint8_t>(FrameType::kCheck) && t <= static_cast<uint8_t>(FrameType::kHeartbeat)) ||
         (t >= static_cast<uint8_t>(FrameType::kHello) && t <= static_cast<uint8_t>(FrameType::kExit));
}

uint32_t readU32(std::string_view s, size_t pos) {
  return (uint32_t(uint8_t(s[pos])) << 24) | (uint32_t(uint8_t(s[pos + 1])) << 16) |
         (uint32_t(uint8_t(s[pos + 2])) << 8) | uint32_t(uint8_t(s[pos + 3]));
}

}  // namespace

PayloadWriter& PayloadWriter::u8(uint8_t v) {
  out_ += static_cast<char>(v);
  return *this;
}

PayloadWriter& PayloadWriter::u16(uint16_t v) {
  out_ += static_cast<char>(v >> 8);
  out_ += static_cast<char>(v & 0xff);
  return *this;
}

PayloadWriter& PayloadWriter::u32(uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out_ += static_cast<char>((v >> shift) & 0xff);
  return *this;
}

PayloadWriter& PayloadWriter::bytes(std::string_view v) {
  if (v.size() > kMaxProxyFrame)
    throw LaunchError(
        detail::concat("proxy frame field of ", v.size(), " bytes exceeds the limit of ", kMaxProxyFrame));
  u32(static_cast<uint32_t>(v.size()));
  out_.append(v);
  return *this;
}

std::string PayloadWriter::frame(FrameType type) const {
  if (out_.size() > kMaxProxyFrame)
    throw LaunchError(detail::concat("proxy ", PayloadReader::typeName(type), " frame of ", out_.size(),
                                     " bytes exceeds the limit of ", kMaxProxyFrame,
                                     " (environment or command too large)"));
  PayloadWriter header;
  header.u32(static_cast<uint32_t>(out_.size())).u8(static_cast<uint8_t>(type));
  return header.out_ + out_;
}

namespace {
constexpr EnumName<FrameType> kFrameTypeNames[] = {
    {FrameType::kCheck, "check"},     {FrameType::kSpawn, "spawn"},
    {FrameType::kStdin, "stdin"},     {FrameType::kStdinEof, "stdin-eof"},
    {FrameType::kSignal, "signal"},   {FrameType::kHeartbeat, "heartbeat"},
    {FrameType::kHello, "hello"},     {FrameType::kCheckResult, "check-result"},
    {FrameType::kStarted, "started"}, {FrameType::kOutput, "output"},
    {FrameType::kExit, "exit"}};
static_assert(namesEvery(kFrameTypeNames, FrameType::kCheck, FrameType::kHeartbeat) &&
              namesEvery(kFrameTypeNames, FrameType::kHello, FrameType::kExit));
}  // namespace

const char* PayloadReader::typeName(FrameType type) { return nameOf(kFrameTypeNames, type, "unknown"); }

void PayloadReader::need(size_t n) const {
  if (data_.size() - pos_ < n)
    throw LaunchError(detail::concat("truncated proxy ", what_, " frame: ", n,
                                     " more bytes needed at offset ", pos_, " of ", data_.size()));
}

uint8_t PayloadReader::u8() {
  need(1);
  return static_cast<uint8_t>(data_[pos_++]);
}

uint16_t PayloadReader::u16() {
  need(2);
  const uint16_t v = static_cast<uint16_t>((uint8_t(data_[pos_]) << 8) | uint8_t(data_[pos_ + 1]));
  pos_ += 2;
  return v;
}

uint32_t PayloadReader::u32() {
  need(4);
  const uint32_t v = readU32(data_, pos_);
  pos_ += 4;
  return v;
}

std::string PayloadReader::bytes() {
  const uint32_t n = u32();
  need(n);
  std::string out(data_.substr(pos_, n));
  pos_ += n;
  return out;
}

void PayloadReader::end() const {
  if (pos_ != data_.size())
    throw LaunchError(detail::concat("malformed proxy ", what_, " frame: ", data_.size() - pos_,
                                     " unexpected bytes after offset ", pos_));
}

std::optional<Frame> FrameDecoder::next() {
  if (pending() < 5) return std::nullopt;
  const uint32_t length = readU32(buffer_, pos_);
  const uint8_t type = static_cast<uint8_t>(buffer_[pos_ + 4]);
  if (length > kMaxProxyFrame) {
    throw LaunchError(detail::concat("proxy frame of ", length, " bytes exceeds the limit of ",
                                     kMaxProxyFrame, " (garbage on the channel?)"));
  }
  if (!knownType(type)) throw LaunchError(detail::concat("unknown proxy frame type ", int(type)));
  if (pending() < 5 + size_t(length)) return std::nullopt;
  Frame frame;
  frame.type = static_cast<FrameType>(type);
  frame.payload = buffer_.substr(pos_ + 5, length);
  pos_ += 5 + length;
  // Compact once the consumed prefix dominates, so a long-lived channel does not grow its buffer.
  if (pos_ > 65536 && pos_ * 2 > buffer_.size()) {
    buffer_.erase(0, pos_);
    pos_ = 0;
  }
  return frame;
}

std::string encodeSpawn(const SpawnRequest& r) {
  PayloadWriter w;
  w.i32(r.rank).bytes(r.host).bytes(r.cwd).u32(static_cast<uint32_t>(r.argv.size()));
  for (const auto& a : r.argv) w.bytes(a);
  w.u32(static_cast<uint32_t>(r.env.size()));
  for (const auto& [name, value] : r.env) w.bytes(name).bytes(value);
  w.u8(r.forward_stdin ? 1 : 0).i32(r.bind_index);
  return w.frame(FrameType::kSpawn);
}

SpawnRequest decodeSpawn(const Frame& frame) {
  PayloadReader in(frame);
  SpawnRequest r;
  r.rank = in.i32();
  r.host = in.bytes();
  r.cwd = in.bytes();
  // A count larger than the bytes present ends in a truncated-frame error, never a large allocation.
  for (uint32_t n = in.u32(); n > 0; --n) r.argv.push_back(in.bytes());
  for (uint32_t n = in.u32(); n > 0; --n) {
    std::string name = in.bytes();
    r.env.emplace_back(std::move(name), in.bytes());
  }
  r.forward_stdin = in.u8() != 0;
  r.bind_index = in.i32();
  in.end();
  if (r.argv.empty())
    throw LaunchError(detail::concat("proxy spawn frame for rank ", r.rank, " has an empty command"));
  return r;
}

}  // namespace hvd::launcher::ssh
