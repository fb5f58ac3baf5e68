#include "deviceplugin/hand_off.h"

#include <algorithm>
#include <string_view>

namespace mgpu::dp {

void HandOffLedger::Matched(Resource resource, std::vector<std::string> ids,
                            const PendingContainer& container) {
  std::sort(ids.begin(), ids.end());
  std::deque<Match>& matches = matches_[resource];
  matches.push_back(Match{std::move(ids), container});
  if (matches.size() > kMaxMatches) matches.pop_front();
}

std::optional<PendingContainer> HandOffLedger::TakeMatch(Resource resource,
                                                         const std::vector<std::string>& ids) {
  auto found = matches_.find(resource);
  if (found == matches_.end()) return std::nullopt;
  std::vector<std::string_view> sorted(ids.begin(), ids.end());
  std::sort(sorted.begin(), sorted.end());
  std::deque<Match>& matches = found->second;
  for (auto it = matches.rbegin(); it != matches.rend(); ++it) {
    if (!std::equal(it->ids.begin(), it->ids.end(), sorted.begin(), sorted.end())) continue;
    PendingContainer out = std::move(it->container);
    matches.erase(std::next(it).base());
    return out;
  }
  return std::nullopt;
}

std::vector<std::string> HandOffLedger::JustAllocated(Resource resource, Clock::time_point now) {
  if (!recent_ || recent_->resource == resource || now - recent_->at > kJustAllocatedWindow) return {};
  recent_->used_by = resource;
  return recent_->cards;
}

HandOffLedger::Allocation HandOffLedger::Allocated(Resource resource, const std::vector<std::string>& ids,
                                                   std::vector<std::string> cards, uint64_t requests_started,
                                                   Clock::time_point now) {
  Allocation out;
  out.matched = TakeMatch(resource, ids);
  if (out.matched) {
    const PendingContainer& c = *out.matched;
    handed_out_[HandedOut{c.pod_uid, c.container, resource}] =
        HandOut{CardSetOf(ContainerAssignment{c.container, c.cards}), requests_started};
  }
  if (recent_ && recent_->used_by == resource) {
    out.split = recent_->cards != cards;
    recent_.reset();
  } else {
    recent_ = Recent{resource, std::move(cards), now, std::nullopt};
  }
  return out;
}

std::optional<PendingContainer> HandOffLedger::Refused(Resource resource,
                                                       const std::vector<std::string>& ids) {
  return TakeMatch(resource, ids);
}

HandedOutCards HandOffLedger::Unsettled(uint64_t answered) {
  HandedOutCards out;
  for (auto it = handed_out_.begin(); it != handed_out_.end();) {
    // The first request started after the hand-out may race the kubelet's recording of it; the one after
    // that starts a poll later, and its answer shows who really holds the cards.
    if (answered > it->second.requests_before + 1) {
      it = handed_out_.erase(it);
    } else {
      out.emplace(it->first, it->second.cards);
      ++it;
    }
  }
  return out;
}

void HandOffLedger::Forget(const std::string& pod_uid) {
  std::erase_if(handed_out_, [&](const auto& h) { return h.first.pod_uid == pod_uid; });
}

HandOff::HandOff(std::function<uint64_t()> requests_started)
    : requests_started_(std::move(requests_started)) {}

void HandOff::Matched(Resource resource, std::vector<std::string> ids, const PendingContainer& container) {
  std::lock_guard lock(mu_);
  ledger_.Matched(resource, std::move(ids), container);
}

std::vector<std::string> HandOff::JustAllocated(Resource resource, Clock::time_point now) {
  std::lock_guard lock(mu_);
  return ledger_.JustAllocated(resource, now);
}

HandOffLedger::Allocation HandOff::Allocated(Resource resource, const std::vector<std::string>& ids,
                                             std::vector<std::string> cards, Clock::time_point now) {
  // Read before the hand-out is recorded: a request started after this may still race the kubelet.
  const uint64_t requests = requests_started_ ? requests_started_() : 0;
  std::lock_guard lock(mu_);
  return ledger_.Allocated(resource, ids, std::move(cards), requests, now);
}

std::optional<PendingContainer> HandOff::Refused(Resource resource, const std::vector<std::string>& ids) {
  std::lock_guard lock(mu_);
  return ledger_.Refused(resource, ids);
}

HandedOutCards HandOff::Unsettled(uint64_t answered) {
  std::lock_guard lock(mu_);
  return ledger_.Unsettled(answered);
}

void HandOff::Forget(const std::string& pod_uid) {
  std::lock_guard lock(mu_);
  ledger_.Forget(pod_uid);
}

}  // namespace mgpu::dp
