// Segment: one anonymous shared mapping for the ranks of one host, and how they get it.
//
// Rank 0 of the group creates a memfd (no name in any file system: nothing is left in /dev/shm or
// elsewhere after any exit, SIGKILL included; the memory goes when the last process that maps it does).
// It listens on an abstract unix socket with a random name (abstract: no file either, and gone with the
// socket), publishes that name in the rendezvous store under <scope>/shm, and hands the memfd to each
// peer that connects (SCM_RIGHTS), after checking that the peer runs as the same user (SO_PEERCRED).
// Once every peer has it, rank 0 closes the socket and deletes the key; everyone unmaps on destruction.
// While it waits, rank 0 looks every second whether its key is still in the store: if it was deleted (an
// elastic job's driver deletes the keys of a round that ended), the peers will not come, and share() throws
// StoreError at once rather than waiting out its timeout.
//
// Abstract unix sockets belong to a network namespace: the ranks of one host must share theirs (they do
// under hvdrun, srun and mpirun). A rank that cannot reach the socket fails with a BackendError that says
// so and names HVD_SHARED_MEMORY=0, which keeps such a job on TCP.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

#include "base/unique_fd.h"
#include "rendezvous/store.h"

namespace hvd::runtime::shm {

struct SegmentOptions {
  std::string scope;  // store prefix, e.g. "shm_localhost"
  int rank = 0;
  int size = 1;
  size_t bytes = 0;  // the mapping's size (rank 0 sets it; the others check it)
  std::chrono::milliseconds timeout{rendezvous::Store::kDefaultTimeout};
};

class Segment {
 public:
  // Collective over the group: blocks until this rank has the mapping, or throws BackendError /
  // StoreError / RendezvousTimeout naming the scope and the cause. Contents start zeroed.
  static Segment share(const std::shared_ptr<rendezvous::Store>& store, const SegmentOptions& options);
  // The two halves of share(), for a caller with a unix socket of its own to the peer: a fresh zeroed mapping
  // of `bytes` and its memfd (to hand over with sendFd), and the peer's side, which maps the memfd it
  // received after checking its size (if_wrong_size: what a wrong size means, for the message). Throw
  // BackendError naming the scope. prefault: every page is allocated and mapped now (MAP_POPULATE) instead of
  // at its first touch. For memory that the job walks through from end to end, such as a control ring: a
  // first touch of a shared page costs a fault (about 10 us on a virtual machine, where the host also backs
  // the page then), and until a ring has wrapped once, its messages keep reaching pages never touched.
  static Segment create(size_t bytes, const std::string& scope, UniqueFd& fd, bool prefault = false);
  static Segment attach(UniqueFd fd, size_t bytes, const std::string& scope, const char* if_wrong_size,
                        bool prefault = false);

  Segment() = default;
  Segment(Segment&& other) noexcept;
  Segment& operator=(Segment&& other) noexcept;
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;
  ~Segment();

  std::byte* data() const { return data_; }
  size_t bytes() const { return bytes_; }

 private:
  Segment(std::byte* data, size_t bytes) : data_(data), bytes_(bytes) {}
  std::byte* data_ = nullptr;
  size_t bytes_ = 0;
};

// One descriptor over a connected unix socket (SCM_RIGHTS, one byte of payload), blocking. Throw BackendError
// naming the scope; receiveFd's result is close-on-exec.
void sendFd(int conn, int fd, const std::string& scope);
int receiveFd(int conn, const std::string& scope);

}  // namespace hvd::runtime::shm
