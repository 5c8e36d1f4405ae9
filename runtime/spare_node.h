// insertThrough(): inserts into a node-based standard container (std::unordered_map, std::unordered_set)
// through a node that an earlier extract() left over, so that a steady state of one insert and one extract
// after another allocates nothing: fill(node) writes the value into that node in place (a string assigned
// into one that has the capacity allocates nothing either). Without a spare node, make() builds the value and
// the container allocates as usual. A node that was not inserted (its key was there) stays the spare. Returns
// (position, inserted), as insert() does. Threading: the container's and the spare node's guard, held.
#pragma once

#include <utility>

namespace hvd::runtime {

template <typename Container, typename Fill, typename Make>
std::pair<typename Container::iterator, bool> insertThrough(Container& c,
                                                            typename Container::node_type& spare, Fill&& fill,
                                                            Make&& make) {
  if (!spare) return c.insert(make());
  fill(spare);
  auto placed = c.insert(std::move(spare));
  if (!placed.inserted) spare = std::move(placed.node);
  return {placed.position, placed.inserted};
}

}  // namespace hvd::runtime
