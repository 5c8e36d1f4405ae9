// The value a rank publishes at <scope>/<rank>: the Gloo TCP addresses of its pairs, one per peer in rank
// order (its own rank skipped), encoded in as few bytes as their shape allows.
//
// A Gloo tcp::Address is 136 bytes (tcp/address.h): a sockaddr_storage (128) and a sequence number (an
// ssize_t, -1 when unset). What the addresses of one rank's pairs share depends on the Gloo build:
//   - A Gloo with one listening socket per device (a tcp::Listener; not the Debian build) gives every pair
//     the device's address and the next sequence number: encoded as shape kSequence, O(1) bytes.
//   - Debian's Gloo (libgloo-dev 0.0~git20220518) listens once per pair: each pair has its own port,
//     picked by the kernel, and the sequence number is unset. Encoded as shape kPorts: the common part
//     once, then 2 bytes per peer.
//   - Anything else (a family other than IPv4/IPv6, mixed families or hosts, another size): kFull, the
//     addresses byte for byte.
// In the compact shapes only the family's sockaddr (16 bytes for IPv4, 28 for IPv6) and the sequence
// number travel; the rest of the sockaddr_storage is padding that getsockname() leaves as it found it
// (uninitialized in Gloo's Address::fromSockName) and that Pair::connect never reads (it connects with
// the family's length). The decoder writes zeros there. kFull keeps every byte.
//
// Layout (integers little-endian): magic 0xA7, version 1, shape, u32 count, then
//   kFull:     u32 size, count x size bytes
//   kSequence: u8 length, `length` sockaddr bytes, i64 first sequence number (entry i has first + i)
//   kPorts:    u8 length, `length` sockaddr bytes (port zero), i64 sequence number, count x 2 port bytes
//              (network order, as in the sockaddr)
// where the sockaddr is cut after its last non-zero byte (the rest, up to the family's length, is zero).
// Errors: a malformed value is a StoreError of one line naming `where` (the store key) and what is wrong.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace hvd::gloo_backend {

inline constexpr uint8_t kAddressListMagic = 0xA7;
inline constexpr uint8_t kAddressListVersion = 1;
// sizeof(gloo::transport::tcp::Address::Impl): sockaddr_storage + ssize_t.
inline constexpr size_t kGlooAddressBytes = 136;

enum class AddressListShape : uint8_t { kFull = 0, kSequence = 1, kPorts = 2 };

// Encodes addresses (each the bytes of a Gloo tcp::Address, in peer order) in the smallest shape that
// holds them.
std::vector<char> encodeAddressList(const std::vector<std::vector<char>>& addresses);

// A parsed (validated) address list; entries are rebuilt on demand. A view: data must outlive it.
class AddressList {
 public:
  // Throws StoreError "malformed Gloo address list at <where>: <what>" for anything that is not a
  // complete value of this layout.
  AddressList(const char* data, size_t size, std::string where);

  size_t size() const { return count_; }
  AddressListShape shape() const { return shape_; }
  // The address of entry i (i < size()): the exact bytes for kFull, the canonical 136 bytes otherwise.
  std::vector<char> at(size_t i) const;

 private:
  const char* data_;
  std::string where_;
  AddressListShape shape_ = AddressListShape::kFull;
  size_t count_ = 0;
  size_t each_ = 0;                // kFull: bytes per entry
  size_t sockaddr_length_ = 0;     // compact shapes
  const char* sockaddr_ = nullptr;
  int64_t sequence_ = 0;
  const char* ports_ = nullptr;    // kPorts
  const char* entries_ = nullptr;  // kFull
};

}  // namespace hvd::gloo_backend
