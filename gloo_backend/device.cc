#include "gloo_backend/device.h"

#include <cerrno>
#include <cstdint>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <gloo/transport/tcp/device.h>

#include "base/error.h"

namespace hvd::gloo_backend {

// A timerfd on Gloo's loop. The handler only drains the expiration count: waking the loop is the point.
struct Device::Ticker final : gloo::transport::tcp::Handler {
  int fd = -1;

  void handleEvents(int /*events*/) override {
    uint64_t expirations;
    [[maybe_unused]] auto rv = ::read(fd, &expirations, sizeof expirations);
  }

  void set(std::chrono::microseconds period) const {
    itimerspec spec{};
    spec.it_interval.tv_nsec = static_cast<long>(period.count()) * 1000;
    spec.it_value = spec.it_interval;  // zero disarms
    ::timerfd_settime(fd, 0, &spec, nullptr);
  }
};

std::shared_ptr<Device> Device::create(const DeviceOptions& options) {
  gloo::transport::tcp::attr attr;
  if (!options.iface.empty()) {
    attr.iface = options.iface;
  } else {
    attr.hostname = options.hostname;
  }
  try {
    return std::shared_ptr<Device>(new Device(gloo::transport::tcp::CreateDevice(attr)));
  } catch (const hvd::Error&) {
    throw;
  } catch (const std::exception& e) {
    throw NetworkError(detail::concat("cannot create the Gloo TCP device on ",
                                      options.iface.empty() ? "host '" + options.hostname + "'"
                                                            : "interface '" + options.iface + "'",
                                      ": ", e.what()));
  }
}

Device::Device(std::shared_ptr<gloo::transport::Device> gloo) : gloo_(std::move(gloo)) {
  auto* tcp = dynamic_cast<gloo::transport::tcp::Device*>(gloo_.get());
  if (!tcp) return;
  auto ticker = std::make_unique<Ticker>();
  ticker->fd = ::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  HVD_CHECK(ticker->fd >= 0, NetworkError, "timerfd_create failed: ", errnoText(errno));
  try {
    tcp->registerDescriptor(ticker->fd, EPOLLIN, ticker.get());
  } catch (const std::exception& e) {
    ::close(ticker->fd);
    throw NetworkError(detail::concat("cannot register a timer with the Gloo device loop: ", e.what()));
  }
  ticker_ = std::move(ticker);
}

Device::~Device() {
  if (!ticker_) return;
  // Tick so ~Loop's join does not wait for epoll_wait's 10 ms timeout. The timerfd stays registered:
  // unregistering it would itself wait for a tick that nothing triggers any more.
  ticker_->set(kTickPeriod);
  std::weak_ptr<gloo::transport::Device> alive = gloo_;
  gloo_.reset();
  if (!alive.expired()) {
    // A Gloo context outlived its Device (a caller bug): the loop thread still runs and may dispatch to
    // the handler, so it is left behind, disarmed, rather than freed under the loop.
    ticker_->set(std::chrono::microseconds(0));
    ticker_.release();
    return;
  }
  ::close(ticker_->fd);
}

void Device::arm(bool on) {
  if (!ticker_) return;
  std::lock_guard lock(mutex_);
  ticking_ += on ? 1 : -1;
  if (ticking_ == (on ? 1 : 0)) ticker_->set(on ? kTickPeriod : std::chrono::microseconds(0));
}

Device::Ticking::Ticking(Device* device) : device_(device) { device_->arm(true); }
Device::Ticking::~Ticking() { device_->arm(false); }

}  // namespace hvd::gloo_backend
