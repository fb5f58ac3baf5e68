// Look-alike pools (DESIGN §5.5): containers on one node whose whole shape is identical (every mgpu amount,
// QoS, compute policy, card count, dedicated or not) are interchangeable, because the kubelet tells the
// device plugin only a device count, never which pod it admits. Both ends of the hand-off account such a
// group the same way, with the one function below:
//  - The group's members are its containers that were assigned cards (D/gpu-assignment). Their assigned card
//    sets form a multiset A, which the extender checked against the cards' capacity when it bound them.
//  - A member that holds real cards (the extender: D/gpu-allocated; the plugin: the kubelet's PodResources
//    and what it just handed out) holds those. The multiset of what members hold is T. (A member the kubelet
//    has admitted without a D/gpu-allocated, the plugin writing one only where the cards differ from the
//    assignment, is counted by the extender as waiting here: its swap's write may still be on its way.)
//  - The members still waiting hold A − T between them: each its own assigned cards while they are left,
//    the others what remains, oldest member first.
// Why this never over-commits a card or mixes compute policies: the plugin hands a waiting member only an
// item of A − T (HoldFromPool's answer), so every item members really hold comes out of A, and the items
// counted on the cards (T plus what is held from A − T) are exactly A's items while T ⊆ A: the same amounts
// on the same cards the extender validated at bind, whichever member took which. Every item of a group
// carries the group's shape, its compute policy included, so moving an item between members never puts
// another policy, QoS or card count on a card. A member whose real cards lie outside A (a kubelet that did
// not take the plugin's preference) is counted where it really is, and the waiting members then hold at most
// one item each, so nothing is counted twice: over-counting that item of A is the conservative error, until
// the waiting members are admitted.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/model.h"

namespace mgpu {

// The shape of one container: two containers with equal keys are look-alikes.
std::string LookAlikeKey(const PodRequest& pod, const ContainerRequest& container);

// A container's cards, as uuids in ascending order: one item of a pool.
using CardSet = std::vector<std::string>;
CardSet CardSetOf(const ContainerAssignment& container);

struct PoolMember {
  CardSet assigned;                // from D/gpu-assignment
  std::optional<CardSet> holding;  // real cards, when it has them; nullopt: still waiting
  int64_t age = 0;                 // assume time: smaller is older
};

// For each member (parallel to `members`): its real cards when it holds some, else the item of A − T it
// holds while waiting (nullopt only when nothing is left for it, which the argument above rules out while
// members' real cards come from the pool).
std::vector<std::optional<CardSet>> HoldFromPool(const std::vector<PoolMember>& members);

// The containers of one node's pods, as both ends group them into pools: the extender's cache (what each pod
// counts) and the plugin (which waiting container is offered which cards). A container whose request could
// not be read (its shape is unknown) is a pool of its own, holding what it holds or, while it waits, its own
// assigned cards: nothing it may be using is taken for another.
struct PoolEntry {
  std::string pool;  // LookAlikeKey, or UnreadablePool
  PoolMember member;
};
std::string UnreadablePool(const std::string& pod_uid, const std::string& container);

// HoldFromPool over each pool of `entries`, answered per entry in the order given.
std::vector<std::optional<CardSet>> HoldFromPools(const std::vector<PoolEntry>& entries);

}  // namespace mgpu
