#include "runtime/loss_watcher.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cstdint>

#include "base/error.h"

namespace hvd::runtime {

LossWatcher::LossWatcher(std::vector<std::pair<int, std::string>> fds, std::function<void(const std::string&)> on_loss)
    : fds_(std::move(fds)), on_loss_(std::move(on_loss)) {
  stop_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  HVD_CHECK(stop_fd_ >= 0, NetworkError, "eventfd for the lost-peer watcher failed: ", errnoText(errno));
  try {
    thread_ = std::thread([this] { run(); });
  } catch (const std::exception& e) {
    ::close(stop_fd_);
    stop_fd_ = -1;
    throw NetworkError(detail::concat("cannot start the lost-peer watcher's thread: ", e.what()));
  }
}

LossWatcher::~LossWatcher() { stop(); }

void LossWatcher::stop() noexcept {
  if (thread_.joinable()) {
    const uint64_t one = 1;
    [[maybe_unused]] auto n = ::write(stop_fd_, &one, sizeof one);
    thread_.join();
  }
  if (stop_fd_ >= 0) {
    ::close(stop_fd_);
    stop_fd_ = -1;
  }
}

void LossWatcher::run() {
  ::pthread_setname_np(::pthread_self(), "hvd-watcher");
  std::vector<pollfd> fds;
  fds.push_back({stop_fd_, POLLIN, 0});
  // Only the hang-up events: POLLIN would report every message the background thread has yet to read.
  for (const auto& [fd, what] : fds_) fds.push_back({fd, POLLRDHUP, 0});
  for (;;) {
    const int rv = ::poll(fds.data(), fds.size(), -1);
    if (rv < 0) {
      if (errno == EINTR) continue;
      return;  // cannot happen with valid descriptors; the Gloo timeout still bounds every wait
    }
    if (fds[0].revents) return;
    for (size_t i = 1; i < fds.size(); ++i) {
      if (fds[i].revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) {
        on_loss_(fds_[i - 1].second);
        return;
      }
    }
  }
}

}  // namespace hvd::runtime
