// The elastic driver's hosts (launcher/elastic_driver.h): the discovery script, usable hosts, blacklisting.
#include <signal.h>

#include <cstdlib>
#include <memory>

#include <boost/asio/post.hpp>

#include "base/error.h"
#include "launcher/elastic_driver.h"
#include "launcher/host_plan.h"
#include "launcher/local/launcher.h"

namespace hvd::launcher {

namespace asio = boost::asio;

std::chrono::seconds discoveryTimeout(const Environment& env) {
  const auto* text = findEnv(env, "HVD_DISCOVERY_TIMEOUT_SECONDS");
  if (!text || text->empty()) return kDefaultDiscoveryTimeout;
  char* end = nullptr;
  const long long seconds = std::strtoll(text->c_str(), &end, 10);
  if (*end != '\0' || seconds < 1 || seconds > 86400) {
    throw UsageError(detail::concat("HVD_DISCOVERY_TIMEOUT_SECONDS must be a number of seconds from 1 to 86400, got '",
                                    *text, "'"));
  }
  return std::chrono::seconds(seconds);
}

// ---- hosts

void ElasticDriver::addHost(const HostSpec& spec) {
  HostState h;
  h.spec = spec;
  hosts_.push_back(std::move(h));
}

ElasticDriver::HostState* ElasticDriver::findHost(const std::string& name) {
  for (auto& h : hosts_) {
    if (h.spec.name == name) return &h;
  }
  return nullptr;
}

std::vector<HostSpec> ElasticDriver::usableHosts() {
  std::vector<HostSpec> usable;
  const auto now = Clock::now();
  for (auto& h : hosts_) {
    if (h.blacklisted_until && *h.blacklisted_until <= now) {
      h.blacklisted_until.reset();
      h.failures.clear();
      message(Stream::kStderr, detail::concat("hvdrun: host ", h.spec.name, " is usable again after its cooldown\n"));
    }
    if (h.listed && !h.blacklisted_until && h.spec.slots > 0) usable.push_back(h.spec);
  }
  return usable;
}

void ElasticDriver::blacklist(HostState& h, const std::string& reason) {
  if (h.blacklisted_until) return;
  ++h.blacklist_count;
  h.blacklist_reason = reason;
  std::string period = "for the rest of the job";
  if (elastic_.cooldown) {
    const auto cooldown = blacklistCooldown(h.blacklist_count, *elastic_.cooldown);
    h.blacklisted_until = Clock::now() + cooldown;
    period = detail::concat("for ", cooldown.count(), " s (--blacklist-cooldown-range)");
  } else {
    h.blacklisted_until = Clock::time_point::max();
  }
  recordLoss(detail::concat("host ", h.spec.name, " blacklisted: ", reason));
  message(Stream::kStderr, detail::concat("hvdrun: blacklisting host ", h.spec.name, " ", period, ": ", reason, "\n"));
  // Its other workers go too.
  for (auto& [id, w] : workers_) {
    if (w.host == h.spec.name && !w.ended && !w.removed) {
      w.removed = true;
      w.worker->signal(SIGTERM);
    }
  }
  armKillTimer();
}

// ---- discovery

void ElasticDriver::runDiscovery() {
  if (stopping_ || finishing_) return;
  LaunchSpec spec;
  spec.rank = 0;
  spec.host.name = "localhost";
  spec.argv = {"/bin/sh", "-c", *elastic_.discovery_script};
  spec.env.assign(inherited_.begin(), inherited_.end());
  spec.cwd = cwd_;
  discovery_events_ = std::make_unique<DiscoveryEvents>(*this);
  if (!discovery_launcher_) discovery_launcher_ = std::make_unique<local::LocalLauncher>(ioc_);
  discovery_timed_out_ = false;
  discovery_ = discovery_launcher_->start(spec, *discovery_events_);
  discovery_timer_.expires_after(discovery_timeout_);
  discovery_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec || !discovery_) return;
    discovery_timed_out_ = true;
    discovery_->signal(SIGKILL);
  });
}

void ElasticDriver::discoveryEnded(const ExitStatus& status, std::string out) {
  discovery_timer_.cancel();
  // The worker object goes once this callback has returned.
  asio::post(ioc_, [this, keep = std::shared_ptr<Worker>(std::move(discovery_))] {});
  std::string problem;
  if (discovery_timed_out_) {
    problem = detail::concat("did not finish within ", discovery_timeout_.count(),
                             " s (HVD_DISCOVERY_TIMEOUT_SECONDS) and was killed");
  } else if (!status.success()) {
    problem = "ended with " + status.describe();
  } else {
    try {
      updateHosts(parseDiscoveryOutput(out, options_.slots_per_host));
    } catch (const UsageError& e) {
      problem = detail::concat("printed what is not a host list: ", e.what());
    }
  }
  if (!problem.empty() && problem != discovery_problem_) {
    message(Stream::kStderr, detail::concat("hvdrun: warning: host discovery script '", *elastic_.discovery_script,
                                            "' ", problem, "; keeping the hosts known so far and retrying every 1 s\n"));
  } else if (problem.empty() && !discovery_problem_.empty()) {
    message(Stream::kStderr, "hvdrun: host discovery script works again\n");
  }
  discovery_problem_ = problem;
  if (stopping_ || finishing_) {
    if (!anyRunning()) finish();
    return;
  }
  tick();
  // horovodrun's period: 1 s after each call ends.
  tick_timer_.expires_after(std::chrono::seconds(1));
  tick_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (!ec) runDiscovery();
  });
}

void ElasticDriver::updateHosts(const std::vector<HostSpec>& found) {
  for (auto& h : hosts_) h.listed = false;
  for (const auto& spec : found) {
    if (HostState* h = findHost(spec.name)) {
      h->listed = true;
      h->spec = spec;
    } else {
      addHost(spec);
    }
  }
}

}  // namespace hvd::launcher
