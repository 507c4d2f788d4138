// Implements include/fitsum/optim/sharding.h.
#include "fitsum/optim/sharding.h"

#include <algorithm>
#include <functional>
#include <numeric>
#include <stdexcept>

namespace fitsum::optim {

std::vector<int> partition_by_size(const std::vector<std::int64_t>& elements, int world_size) {
  if (world_size < 1) throw std::invalid_argument("partition_by_size: world_size must be at least 1");
  std::vector<std::size_t> order(elements.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return elements[a] > elements[b]; });
  std::vector<std::int64_t> load(static_cast<std::size_t>(world_size), 0);
  std::vector<int> owner(elements.size(), 0);
  for (const auto i : order) {
    const auto lightest = std::min_element(load.begin(), load.end()) - load.begin();
    owner[i] = static_cast<int>(lightest);
    load[static_cast<std::size_t>(lightest)] += elements[i];
  }
  return owner;
}

std::uint64_t largest_share(const std::vector<std::int64_t>& elements, const std::vector<std::uint64_t>& bytes,
                            int world_size) {
  if (bytes.size() != elements.size()) throw std::invalid_argument("largest_share: one byte count per tensor");
  const auto owner = partition_by_size(elements, world_size);
  std::vector<std::uint64_t> share(static_cast<std::size_t>(world_size), 0);
  for (std::size_t i = 0; i < owner.size(); ++i) share[static_cast<std::size_t>(owner[i])] += bytes[i];
  return *std::max_element(share.begin(), share.end());
}

std::uint64_t largest_broadcast_bucket(const std::vector<std::int64_t>& elements, int world_size) {
  if (world_size <= 1) return 0;
  std::vector<std::uint64_t> small(elements.size(), 0);
  for (std::size_t i = 0; i < elements.size(); ++i) {
    const auto bytes = static_cast<std::uint64_t>(elements[i]) * 4;
    if (bytes < static_cast<std::uint64_t>(kBroadcastBucketBytes)) small[i] = bytes;
  }
  return std::min(largest_share(elements, small, world_size), static_cast<std::uint64_t>(kBroadcastBucketBytes));
}

ShardedGradients sharded_gradients_of(const std::vector<std::int64_t>& elements, int world_size,
                                      std::int64_t bucket_bytes) {
  std::vector<std::uint64_t> bytes;
  std::uint64_t total = 0;
  for (auto n : elements) {
    bytes.push_back(static_cast<std::uint64_t>(n) * 4);
    total += bytes.back();
  }
  ShardedGradients g;
  if (world_size <= 1) {
    g.share = total;
    return g;
  }
  auto largest = bytes;
  std::sort(largest.begin(), largest.end(), std::greater<>());
  largest.resize(std::min<std::size_t>(2, largest.size()));
  std::uint64_t in_flight = 2 * static_cast<std::uint64_t>(bucket_bytes);
  for (auto b : largest) in_flight += b;
  g.share = largest_share(elements, bytes, world_size);
  g.in_flight = std::min(total, in_flight);
  g.packed = largest_packed_bucket(elements, bucket_bytes);
  return g;
}

std::uint64_t sharded_gradient_bytes(const std::vector<std::int64_t>& elements, int world_size,
                                     std::int64_t bucket_bytes) {
  const auto g = sharded_gradients_of(elements, world_size, bucket_bytes);
  return g.share + g.in_flight;
}

std::uint64_t largest_packed_bucket(const std::vector<std::int64_t>& elements, std::int64_t bucket_bytes) {
  std::uint64_t largest = 0, filled = 0;
  std::size_t members = 0;
  const auto close = [&] {
    if (members > 1) largest = std::max(largest, filled);
  };
  for (auto k = elements.size(); k-- > 0;) {  // GradientReducer's order: from the last tensor back
    const auto bytes = static_cast<std::uint64_t>(elements[k]) * 4;
    if (members == 0 || filled + bytes > static_cast<std::uint64_t>(bucket_bytes)) {
      close();
      filled = 0;
      members = 0;
    }
    filled += bytes;
    ++members;
  }
  close();
  return largest;
}

}  // namespace fitsum::optim
