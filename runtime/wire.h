// The runtime's control-plane messages and their byte encoding (little-endian, length-prefixed
// strings and vectors). Both ends are libhvd of the same build, so there is no versioning beyond the
// magic in Hello.
//
//   worker -> coordinator : Hello (once), RequestBatch (new requests, shutdown request)
//   coordinator -> worker : ResponseList (what every rank executes next, in this order)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/work.h"

namespace hvd::runtime {

enum class MessageKind : uint8_t { kHello = 1, kRequests = 2, kResponses = 3 };

struct Hello {
  static constexpr uint64_t kMagic = 0x68766431'00000007ull;  // "hvd1", protocol 7 (Hello::rings)
  uint64_t magic = kMagic;
  uint64_t nonce = 0;  // the coordinator's per-job secret, read from the store
  int32_t rank = -1;
  // The worker, connected over a unix socket, asks for shared-memory rings (runtime/shm/ring_channel.h) and
  // waits for them before it sends anything else.
  bool rings = false;
};

struct RequestBatch {
  std::vector<Request> requests;  // descriptors only (input/output pointers are not sent)
  // Response cache hits: ids the coordinator assigned to a name whose descriptor this rank submits
  // again unchanged (steady-state training steps send 4 bytes per tensor instead of its descriptor).
  std::vector<uint32_t> cached;
  bool shutdown = false;          // this rank asks the job to shut down
  // What this rank's user threads are blocked waiting for, when it changed since the last batch (else
  // has_waiting is false): process set ids and names, pairwise.
  bool has_waiting = false;
  std::vector<int32_t> waiting_sets;
  std::vector<std::string> waiting_names;
};

struct Response {
  enum class Kind : uint8_t { kExecute = 0, kError = 1 };
  Kind kind = Kind::kExecute;
  OpType type = OpType::kAllreduce;
  std::vector<std::string> names;  // several: fused allreduce, in buffer order
  int32_t process_set = 0;         // the set the names belong to
  std::vector<uint32_t> cache_ids; // per name: its response cache id, 0 = not cached
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  double prescale = 1.0;
  double postscale = 1.0;
  int32_t root = 0;                // broadcast: global root rank; kProcessSet: the set's id
  int64_t row_elements = 1;
  // allreduce: elements of each name; allgather: rows of each set rank; reducescatter/broadcast: {rows};
  // kProcessSet: the added set's ranks (empty: removed).
  std::vector<int64_t> counts;
  // alltoall: n x n rows (n: the set's size), [sender * n + receiver] in set ranks.
  std::vector<int64_t> splits;
  // allreduce while some ranks have joined: they contribute zeros.
  std::vector<int32_t> joined_ranks;
  int32_t last_joined_rank = -1;  // join: the last rank to join
  std::string error;              // kError: the message every rank reports
  enum class ErrorClass : uint8_t { kMismatch = 0, kStalled = 1, kInvalid = 2 };
  ErrorClass error_class = ErrorClass::kMismatch;
};

struct ResponseList {
  std::vector<Response> responses;
  bool shutdown = false;         // every rank leaves after executing responses
  std::string shutdown_reason;   // why (empty: an orderly shutdown requested by a rank)
  bool abort = false;            // a rank failed: skip the orderly close barrier
  bool peer_lost = false;        // abort because a peer process was lost: pending operations fail with
                                 // PeerLostError (elastic jobs re-form), not ShutDownError
  // Autotune: the global set's allreduce path from this list on (kPathFlat, kPathHierarchical), or
  // kPathUnchanged. Every rank switches before executing the list's responses.
  static constexpr uint8_t kPathUnchanged = 0, kPathFlat = 1, kPathHierarchical = 2;
  uint8_t path = kPathUnchanged;
};

// Descriptor equality (what the response cache compares): every field but name and pointers.
bool sameDescriptor(const Request& a, const Request& b);

std::vector<char> encode(const Hello& m);
std::vector<char> encode(const RequestBatch& m);
std::vector<char> encode(const ResponseList& m);

// Decoders throw BackendError on malformed input (naming what was being read).
Hello decodeHello(const std::vector<char>& payload);
RequestBatch decodeRequestBatch(const std::vector<char>& payload);
ResponseList decodeResponseList(const std::vector<char>& payload);

}  // namespace hvd::runtime
