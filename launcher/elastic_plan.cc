#include "launcher/elastic_plan.h"

#include <algorithm>
#include <map>
#include <set>

#include "base/error.h"

namespace hvd::launcher {

std::string slotName(const std::string& host, int local_rank) { return host + ":" + std::to_string(local_rank); }

std::vector<std::string> offeredSlots(const std::vector<HostSpec>& hosts, std::optional<int> max_np) {
  std::vector<std::string> slots;
  for (const auto& h : hosts) {
    for (int index = 0; index < h.slots && !(max_np && static_cast<int>(slots.size()) >= *max_np); ++index) {
      slots.push_back(slotName(h.name, index));
    }
  }
  return slots;
}

std::vector<ElasticPlace> planElasticRound(const std::vector<HostSpec>& hosts, const std::vector<std::string>& survivors,
                                           const std::set<std::string>& joining, std::optional<int> max_np) {
  struct Offer {
    const HostSpec* host;
    int index;
  };
  std::map<std::string, Offer> offered;
  std::vector<std::string> in_host_order;
  for (const auto& h : hosts) {
    for (int index = 0; index < h.slots && !(max_np && static_cast<int>(in_host_order.size()) >= *max_np); ++index) {
      in_host_order.push_back(slotName(h.name, index));
      offered.emplace(in_host_order.back(), Offer{&h, index});
    }
  }
  // Rank order: the survivors in their order, then the joining slots in host order.
  std::vector<std::string> members;
  std::set<std::string> taken;
  for (const auto& slot : survivors) {
    if (offered.count(slot) && taken.insert(slot).second) members.push_back(slot);
  }
  for (const auto& slot : in_host_order) {
    if (joining.count(slot) && taken.insert(slot).second) members.push_back(slot);
  }
  // Local ranks: a host's members by slot index; cross ranks: over the hosts (in order) that have a member
  // at that local rank.
  std::map<const HostSpec*, std::vector<int>> indexes;  // host -> its members' slot indexes, sorted
  for (const auto& slot : members) indexes[offered.at(slot).host].push_back(offered.at(slot).index);
  for (auto& [host, list] : indexes) std::sort(list.begin(), list.end());
  std::vector<ElasticPlace> plan;
  for (size_t r = 0; r < members.size(); ++r) {
    const Offer& o = offered.at(members[r]);
    const auto& mine = indexes.at(o.host);
    ElasticPlace e;
    e.slot = members[r];
    e.index = o.index;
    Placement& p = e.place;
    p.rank = static_cast<int>(r);
    p.size = static_cast<int>(members.size());
    p.local_rank = static_cast<int>(std::find(mine.begin(), mine.end(), o.index) - mine.begin());
    p.local_size = static_cast<int>(mine.size());
    for (const auto& h : hosts) {
      const auto it = indexes.find(&h);
      if (it == indexes.end() || static_cast<int>(it->second.size()) <= p.local_rank) continue;
      if (&h == o.host) p.cross_rank = p.cross_size;
      ++p.cross_size;
    }
    p.host = *o.host;
    plan.push_back(std::move(e));
  }
  return plan;
}

std::chrono::seconds blacklistCooldown(int count, std::pair<int, int> range) {
  long long seconds = range.first;
  for (int i = 1; i < count && seconds < range.second; ++i) seconds *= 2;
  return std::chrono::seconds(std::min<long long>(seconds, range.second));
}

std::string describeHosts(const std::vector<Placement>& plan) {
  std::vector<std::pair<std::string, int>> counts;
  for (const auto& p : plan) {
    auto it = std::find_if(counts.begin(), counts.end(), [&](const auto& c) { return c.first == p.host.name; });
    if (it == counts.end()) {
      counts.emplace_back(p.host.name, 1);
    } else {
      ++it->second;
    }
  }
  std::string out;
  for (const auto& [host, n] : counts) out += detail::concat(out.empty() ? "" : ", ", host, ":", n);
  return out;
}

}  // namespace hvd::launcher
