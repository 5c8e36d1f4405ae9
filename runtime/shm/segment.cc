#include "runtime/shm/segment.h"

#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>
#include <utility>

#include "base/error.h"
#include "base/unique_fd.h"
#include "runtime/channel.h"

namespace hvd::runtime::shm {
namespace {

using Clock = std::chrono::steady_clock;
constexpr const char* kKey = "shm";
constexpr std::chrono::milliseconds kKeyCheckInterval{1000};

// Waits until fd is readable; false once deadline passed.
bool waitReadable(int fd, Clock::time_point deadline) {
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    const int rv = ::poll(&p, 1, static_cast<int>(std::min<long long>(left, 1000)));
    if (rv > 0) return true;
    if (rv < 0 && errno != EINTR) return false;
  }
}

// One byte of payload with room for one descriptor: what sendFd and receiveFd exchange.
struct FdMessage {
  char byte = 'm';
  iovec iov{&byte, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  FdMessage() {
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
  }
  FdMessage(const FdMessage&) = delete;
  FdMessage& operator=(const FdMessage&) = delete;
};

std::byte* mapFd(int fd, size_t bytes, const std::string& scope, bool prefault) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | (prefault ? MAP_POPULATE : 0), fd, 0);
  HVD_CHECK(p != MAP_FAILED, BackendError, "shared memory of scope '", scope, "': mmap of ", bytes,
            " bytes failed: ", errnoText(errno));
  return static_cast<std::byte*>(p);
}

}  // namespace

void sendFd(int conn, int fd, const std::string& scope) {
  FdMessage m;
  cmsghdr* c = CMSG_FIRSTHDR(&m.msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &fd, sizeof fd);
  ssize_t rv;
  do {
    rv = ::sendmsg(conn, &m.msg, MSG_NOSIGNAL);
  } while (rv < 0 && errno == EINTR);
  HVD_CHECK(rv == 1, BackendError, "shared memory of scope '", scope, "': handing the segment to a peer failed: ",
            errnoText(errno));
}

int receiveFd(int conn, const std::string& scope) {
  FdMessage m;
  ssize_t rv;
  do {
    rv = ::recvmsg(conn, &m.msg, MSG_CMSG_CLOEXEC);
  } while (rv < 0 && errno == EINTR);
  HVD_CHECK(rv == 1, BackendError, "shared memory of scope '", scope, "': receiving the segment from rank 0 failed: ",
            rv == 0 ? std::string("connection closed") : errnoText(errno));
  cmsghdr* c = CMSG_FIRSTHDR(&m.msg);
  HVD_CHECK(c && c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS, BackendError, "shared memory of scope '",
            scope, "': rank 0 sent no file descriptor");
  int fd = -1;
  std::memcpy(&fd, CMSG_DATA(c), sizeof fd);
  return fd;
}

Segment Segment::share(const std::shared_ptr<rendezvous::Store>& store, const SegmentOptions& options) {
  const auto deadline = Clock::now() + options.timeout;
  rendezvous::PrefixStore scoped(options.scope, store);
  if (options.rank == 0) {
    UniqueFd mem;
    Segment segment = create(options.bytes, options.scope, mem);
    if (options.size == 1) return segment;
    std::random_device random;
    const std::string name = detail::concat("hvd-shm-", ::getpid(), "-", std::hex, random(), random());
    UniqueFd listener(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_un addr;
    const socklen_t len = abstractAddress(name, addr);
    HVD_CHECK(listener.get() >= 0 && ::bind(listener.get(), reinterpret_cast<sockaddr*>(&addr), len) == 0 &&
                  ::listen(listener.get(), options.size) == 0,
              BackendError, "shared memory of scope '", options.scope, "': listening on unix socket @", name,
              " failed: ", errnoText(errno));
    scoped.set(kKey, rendezvous::Bytes(name.begin(), name.end()));
    for (int handed = 1; handed < options.size;) {
      // Looks at the key between waits of a second: an elastic job's driver deletes an ended round's keys,
      // and then the peers this round waits for are on their way to the next one, not here.
      if (!waitReadable(listener.get(), std::min(deadline, Clock::now() + kKeyCheckInterval))) {
        HVD_CHECK(Clock::now() < deadline, BackendError, "shared memory of scope '", options.scope, "': only ",
                  handed - 1, " of ", options.size - 1, " local peers fetched the segment within ",
                  options.timeout.count(), " ms (are the ranks of this host in different network namespaces? "
                  "HVD_SHARED_MEMORY=0 keeps the job on TCP)");
        HVD_CHECK(scoped.check({kKey}), StoreError, "shared memory of scope '", options.scope, "': its key '",
                  kKey, "' was deleted from ", scoped.describe(), " while ", options.size - handed, " of ",
                  options.size - 1, " local peers had not fetched the segment (an elastic job's driver deletes the keys of a round that ended)");
        continue;
      }
      UniqueFd conn(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
      if (conn.get() < 0) continue;
      ucred cred{};
      socklen_t cred_len = sizeof cred;
      if (::getsockopt(conn.get(), SOL_SOCKET, SO_PEERCRED, &cred, &cred_len) != 0 || cred.uid != ::geteuid()) {
        continue;  // not this job's user: no memory for it
      }
      sendFd(conn.get(), mem.get(), options.scope);
      ++handed;
    }
    scoped.deleteKey(kKey);
    return segment;
  }
  const auto raw = scoped.get(kKey, options.timeout);
  const std::string name(raw.begin(), raw.end());
  UniqueFd conn(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un addr;
  const socklen_t len = abstractAddress(name, addr);
  HVD_CHECK(conn.get() >= 0 && ::connect(conn.get(), reinterpret_cast<sockaddr*>(&addr), len) == 0, BackendError,
            "shared memory of scope '", options.scope, "': cannot reach local rank 0 at unix socket @", name, ": ",
            errnoText(errno),
            " (are the ranks of this host in different network namespaces? HVD_SHARED_MEMORY=0 keeps the job on TCP)");
  HVD_CHECK(waitReadable(conn.get(), deadline), BackendError, "shared memory of scope '", options.scope,
            "': local rank 0 did not hand over the segment within ", options.timeout.count(), " ms");
  return attach(UniqueFd(receiveFd(conn.get(), options.scope)), options.bytes, options.scope,
                "ranks of this host disagree on the group size or chunk");
}

Segment Segment::create(size_t bytes, const std::string& scope, UniqueFd& fd, bool prefault) {
  UniqueFd mem(::memfd_create(("hvd:" + scope).c_str(), MFD_CLOEXEC));
  HVD_CHECK(mem.get() >= 0, BackendError, "shared memory of scope '", scope, "': memfd_create failed: ",
            errnoText(errno));
  HVD_CHECK(::ftruncate(mem.get(), static_cast<off_t>(bytes)) == 0, BackendError, "shared memory of scope '", scope,
            "': sizing the segment to ", bytes, " bytes failed: ", errnoText(errno));
  Segment segment(mapFd(mem.get(), bytes, scope, prefault), bytes);
  fd = std::move(mem);
  return segment;
}

Segment Segment::attach(UniqueFd fd, size_t bytes, const std::string& scope, const char* if_wrong_size,
                        bool prefault) {
  struct stat st{};
  HVD_CHECK(::fstat(fd.get(), &st) == 0 && static_cast<size_t>(st.st_size) == bytes, BackendError,
            "shared memory of scope '", scope, "': the segment has ", st.st_size, " bytes, expected ", bytes, " (",
            if_wrong_size, ")");
  return Segment(mapFd(fd.get(), bytes, scope, prefault), bytes);
}

Segment::Segment(Segment&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

Segment& Segment::operator=(Segment&& other) noexcept {
  std::swap(data_, other.data_);
  std::swap(bytes_, other.bytes_);
  return *this;
}

Segment::~Segment() {
  if (data_) ::munmap(data_, bytes_);
}

}  // namespace hvd::runtime::shm
