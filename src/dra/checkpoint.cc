#include "dra/checkpoint.h"

#include <cstdio>
#include <filesystem>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "common/file.h"

namespace mgpu::dra {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

constexpr int kVersion = 1;

// FNV-1a, 64 bits, as 16 hex digits: enough to catch a torn or edited file.
std::string Checksum(const std::string& text) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  char out[17];
  std::snprintf(out, sizeof out, "%016llx", static_cast<unsigned long long>(h));
  return out;
}

json ToJson(const PreparedClaim& c) {
  json devices = json::array();
  for (const PreparedDevice& d : c.devices) {
    devices.push_back({{"requests", d.requests},
                       {"pool", d.pool},
                       {"device", d.device},
                       {"shareID", d.share_id},
                       {"cdiIDs", d.cdi_ids}});
  }
  return {
      {"uid", c.uid}, {"namespace", c.ns}, {"name", c.name}, {"devices", devices}, {"cdiSpec", c.cdi_spec}};
}

}  // namespace

std::string EncodeCheckpoint(const std::map<std::string, PreparedClaim>& claims) {
  json list = json::array();
  for (const auto& [uid, c] : claims) list.push_back(ToJson(c));
  const std::string body = list.dump();
  return json{{"version", kVersion}, {"checksum", Checksum(body)}, {"claims", std::move(list)}}.dump(1) +
         "\n";
}

Result<std::map<std::string, PreparedClaim>> DecodeCheckpoint(const std::string& text) {
  const json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) return Error{"it is not JSON"};
  if (doc.value("version", json()) != kVersion)
    return Error{"its version is " + doc.value("version", json()).dump() + ", not " +
                 std::to_string(kVersion)};
  const json& list = doc.value("claims", json());
  if (!list.is_array()) return Error{"it has no list of claims"};
  if (doc.value("checksum", json()) != Checksum(list.dump()))
    return Error{"its checksum does not match its claims (torn or edited)"};
  std::map<std::string, PreparedClaim> out;
  try {
    for (const json& c : list) {
      PreparedClaim claim{c.at("uid").get<std::string>(),
                          c.at("namespace").get<std::string>(),
                          c.at("name").get<std::string>(),
                          {},
                          c.at("cdiSpec").get<std::string>()};
      for (const json& d : c.at("devices")) {
        claim.devices.push_back(
            PreparedDevice{d.at("requests").get<std::vector<std::string>>(), d.at("pool").get<std::string>(),
                           d.at("device").get<std::string>(), d.at("shareID").get<std::string>(),
                           d.at("cdiIDs").get<std::vector<std::string>>()});
      }
      if (claim.uid.empty()) return Error{"a claim has no UID"};
      out[claim.uid] = std::move(claim);
    }
  } catch (const json::exception& e) {
    return Error{std::string("a claim is malformed: ") + e.what()};
  }
  return out;
}

Result<std::unique_ptr<PreparedClaims>> PreparedClaims::Open(const std::string& path) {
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  if (ec) return Error{"cannot create the folder of the checkpoint " + path + ": " + ec.message()};
  std::unique_ptr<PreparedClaims> out(new PreparedClaims(path));
  std::optional<FileLock> lock;
  auto claims = out->Read(FileLock::Mode::kShared, lock);
  if (!claims.ok()) return claims.error();
  out->last_read_ = std::move(*claims);
  return out;
}

Result<std::map<std::string, PreparedClaim>> PreparedClaims::Read(FileLock::Mode mode,
                                                                   std::optional<FileLock>& lock) const {
  auto taken = FileLock::Wait(path_ + ".lock", mode);
  if (!taken.ok()) return taken.error();
  lock.emplace(std::move(*taken));
  std::error_code ec;
  if (!fs::exists(path_, ec)) return std::map<std::string, PreparedClaim>{};
  Result<std::string> text = ReadFile(path_);
  if (!text.ok()) return Error{"cannot read the checkpoint " + path_};
  auto claims = DecodeCheckpoint(*text);
  if (!claims.ok())
    return Error{
        "the checkpoint " + path_ + " cannot be used: " + claims.message() +
        "; move it away to start with no prepared claims (the kubelet prepares running pods' claims again)"};
  return claims;
}

Result<PreparedClaims::Held> PreparedClaims::Hold() const {
  std::optional<FileLock> lock;
  auto claims = Read(FileLock::Mode::kExclusive, lock);
  if (!claims.ok()) return claims.error();
  return Held(*this, std::move(*lock), std::move(*claims));
}

std::map<std::string, PreparedClaim> PreparedClaims::Stored() const {
  std::optional<FileLock> lock;
  auto claims = Read(FileLock::Mode::kShared, lock);
  std::lock_guard guard(mu_);
  if (claims.ok()) {
    last_read_ = std::move(*claims);
  } else {
    spdlog::error("{}; answering with the claims read last", claims.message());
  }
  return last_read_;
}

std::optional<PreparedClaim> PreparedClaims::Find(const std::string& uid) const {
  auto claims = Stored();
  auto it = claims.find(uid);
  if (it == claims.end()) return std::nullopt;
  return it->second;
}

std::vector<PreparedClaim> PreparedClaims::All() const {
  std::vector<PreparedClaim> out;
  for (auto& [uid, c] : Stored()) out.push_back(std::move(c));
  return out;
}

Status PreparedClaims::Add(PreparedClaim claim) {
  auto held = Hold();
  if (!held.ok()) return held.error();
  return held->Add(std::move(claim));
}

Status PreparedClaims::Remove(const std::string& uid) {
  auto held = Hold();
  if (!held.ok()) return held.error();
  return held->Remove(uid);
}

std::optional<PreparedClaim> PreparedClaims::Held::Find(const std::string& uid) const {
  auto it = claims_.find(uid);
  if (it == claims_.end()) return std::nullopt;
  return it->second;
}

Status PreparedClaims::Held::Add(PreparedClaim claim) {
  auto next = claims_;
  next[claim.uid] = std::move(claim);
  return Write(std::move(next));
}

Status PreparedClaims::Held::Remove(const std::string& uid) {
  if (!claims_.count(uid)) return Status::Ok();
  auto next = claims_;
  next.erase(uid);
  return Write(std::move(next));
}

Status PreparedClaims::Held::Write(std::map<std::string, PreparedClaim> next) {
  if (Status s = WriteFileAtomically(owner_.path_, EncodeCheckpoint(next), 0600); !s.ok()) return s;
  claims_ = std::move(next);
  std::lock_guard guard(owner_.mu_);
  owner_.last_read_ = claims_;
  return Status::Ok();
}

}  // namespace mgpu::dra
