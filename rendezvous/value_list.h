// The bodies of multi-key fetches (POST /<scope>?wait_ms=N&values=1, handler.h): a list of values, each as
// its length (unsigned LEB128, 1 byte below 128) and its bytes, or with &refs=1 either that or a reference
// to an equal earlier value. The server's encoders (whole values, slices, windows of neighbouring slices)
// and the client's decoder.
//
// Pure functions of their arguments, safe from any thread. The decoder reports a malformed body as nullopt;
// the encoders cannot fail (a broken invariant is HVD_INTERNAL_ASSERT's InternalError).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "rendezvous/store.h"

namespace hvd::rendezvous {

// Slices of at most kBatchedSliceBytes (a rank's column of every peer's address list) are answered in
// windows of kSliceWindow neighbouring slices, built in one pass (KvState::valuesBody).
inline constexpr uint64_t kBatchedSliceBytes = 8;
inline constexpr size_t kSliceWindow = 64;

// The body of a multi-key fetch: each value as its length (unsigned LEB128, 1 byte below 128) and its
// bytes. splitValues returns the values (views into body), or nullopt when body is not such a sequence.
void appendValue(std::string& out, std::string_view value);
// With &refs=1 (ValueRange::repeats) a value is either LEB128(length << 1) and its bytes, or
// LEB128((back - 1) << 1 | 1): the same bytes as the value `back` places earlier (back >= 1).
void appendValueOrRef(std::string& out, std::string_view value, std::optional<uint32_t> back);
// refs: body is in appendValueOrRef's encoding (a reference to a later or absent value is malformed).
std::optional<std::vector<std::string_view>> splitValues(std::string_view body, bool refs = false);

// A multi-key answer (range.of() of every value) in appendValue's encoding, sized exactly and filled in
// place: a column answer is N slices of a few bytes each, where a call to append() per slice would cost
// more than the bytes.
std::string encodePacked(const std::vector<std::string_view>& values, ValueRange range);

// The same in appendValueOrRef's encoding: each distinct slice once, the others as the distance back to
// its nearest occurrence (1 for consecutive ranks of one host: one byte).
std::string encodeWithRefs(const std::vector<std::string_view>& values, ValueRange range);

// The answers for `count` slices of `length` bytes at first, first + length, ... (appendValue's encoding,
// each value's slice clipped to its end), built in one pass over the values: the slices of one value lie
// side by side, so a value costs one or two cache misses for all of them instead of one per answer.
// length is at most kBatchedSliceBytes: each slice's length is written as one byte.
std::vector<std::string> encodePackedWindow(const std::vector<std::string_view>& values, uint64_t first,
                                            uint64_t length, size_t count);

}  // namespace hvd::rendezvous
