// The Gloo TCP device of a process (one epoll loop thread shared by every context), plus a ticker that
// removes Gloo's 10 ms stalls from connecting and closing.
//
// Why the ticker: Gloo's tcp::Loop waits in epoll_wait(..., 10 ms), and Loop::unregisterDescriptor, called
// from any other thread, blocks until the loop's next iteration ("wait for the loop to tick", so that no
// handler of the removed fd runs after it returns). On an idle loop that is up to 10 ms per call, and Gloo
// calls it once per pair on the connecting side of every connect (the listening socket is dropped), once
// per pair on every close, and ~Loop waits for the same tick before its thread exits. For a 2-rank job
// that was ~45 ms of a 68 ms run (measured, docs/runtime.md). While a Ticking guard lives, a timerfd
// registered with the loop fires every kTickPeriod, so those waits end within about that period. It is
// armed only around pair connects, closes and the device's own destruction -- never while ranks wait for
// each other through the store, where thousands of wake-ups a second would only take CPU from the peers
// that are still starting.
//
// Lifetime: the loop thread may call the ticker's handler until it has exited, so the handler lives until
// the Gloo device is gone. Every Gloo context holds the device: destroy (close) them before the Device.
// Threading: create/destroy on one thread; keepTicking() from any thread.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <string>

namespace gloo::transport {
class Device;
}

namespace hvd::gloo_backend {

struct DeviceOptions {
  // Network interface to bind (HOROVOD_GLOO_IFACE). Empty: bind the address given by hostname.
  std::string iface;
  // Used when iface is empty. Empty: Gloo resolves this machine's host name.
  std::string hostname;
};

class Device {
 public:
  // How often the loop wakes while ticking: the longest a Gloo unregister then waits.
  static constexpr std::chrono::microseconds kTickPeriod{50};

  // Throws NetworkError naming the interface or host when Gloo cannot bind.
  static std::shared_ptr<Device> create(const DeviceOptions& options);
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  const std::shared_ptr<gloo::transport::Device>& gloo() const { return gloo_; }

  // The loop ticks every kTickPeriod while at least one returned guard lives.
  class Ticking {
   public:
    explicit Ticking(Device* device);
    ~Ticking();
    Ticking(const Ticking&) = delete;
    Ticking& operator=(const Ticking&) = delete;

   private:
    Device* device_;
  };
  [[nodiscard]] Ticking keepTicking() { return Ticking(this); }

 private:
  struct Ticker;
  explicit Device(std::shared_ptr<gloo::transport::Device> gloo);
  void arm(bool on);

  std::shared_ptr<gloo::transport::Device> gloo_;
  std::unique_ptr<Ticker> ticker_;  // null where the device is not Gloo's tcp::Device
  std::mutex mutex_;
  int ticking_ = 0;  // guards alive
};

}  // namespace hvd::gloo_backend
